// Package decider is the frame the hub's decision controllers (Rollout, Project) share: how
// they are registered and what wakes them (Controller.Builder), how one reconcile of their hub
// object is read, logged and counted (Controller.Reconcile), their options (ControllerOptions)
// and their per-object metrics (ObjectMetrics). Each controller embeds a Controller and adds its
// decision: read the fleet (package fleetview), decision.Decide, write.
package decider
