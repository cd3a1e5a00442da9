package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	tfjson "github.com/hashicorp/terraform-json"
)

// planSummary is what a run reports of a plan.
type planSummary struct {
	add, change, destroy int32
	// driftReverts counts, of the add/change/destroy changes, those of a resource the plan's
	// refresh found changed outside the tool (in resource_drift): applying them puts back
	// what drifted.
	driftReverts int32
	hasChanges   bool
}

// summarizePlan counts the resource changes of a plan JSON (`tofu show -json`, read with
// HashiCorp's terraform-json, which refuses a format version it does not know): create adds,
// update changes, delete destroys, and a replacement (delete and create, either order) both adds
// and destroys. The plan has changes when a resource is added, changed, destroyed or forgotten,
// or an output changes (applying it changes the state). Of the added, changed and destroyed
// resources, those whose address is also in the plan's resource_drift with a change (the
// refresh found them changed outside the tool) are counted as drift reverts.
func summarizePlan(planJSON []byte) (planSummary, error) {
	var p tfjson.Plan
	if err := json.Unmarshal(planJSON, &p); err != nil {
		return planSummary{}, fmt.Errorf("reading the plan JSON: %w", err)
	}
	drifted := map[string]bool{}
	for _, rd := range p.ResourceDrift {
		if rd != nil && rd.Change != nil && !rd.Change.Actions.NoOp() && !rd.Change.Actions.Read() {
			drifted[rd.Address] = true
		}
	}
	var s planSummary
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil {
			continue
		}
		counted := true
		switch a := rc.Change.Actions; {
		case a.Replace():
			s.add++
			s.destroy++
		case a.Create():
			s.add++
		case a.Delete():
			s.destroy++
		case a.Update():
			s.change++
		case a.Forget():
			s.hasChanges = true
			counted = false
		default:
			counted = false
		}
		if counted && drifted[rc.Address] {
			s.driftReverts++
		}
	}
	for _, oc := range p.OutputChanges {
		if oc != nil && !oc.Actions.NoOp() {
			s.hasChanges = true
		}
	}
	s.hasChanges = s.hasChanges || s.add+s.change+s.destroy > 0
	return s, nil
}

func (s planSummary) String() string {
	if !s.hasChanges {
		return "No changes."
	}
	return fmt.Sprintf("Plan: %d to add, %d to change, %d to destroy.", s.add, s.change, s.destroy)
}

// planSHA256 is the SHA-256 (hex) of a plan JSON (`tofu show -json`) without its top-level
// "timestamp": two plans that would apply the same changes, from the same configuration,
// variables and prior state, have the same digest whenever they were made. The top-level keys
// are written in sorted order; their values as the tool rendered them.
func planSHA256(planJSON []byte) (string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(planJSON, &top); err != nil {
		return "", fmt.Errorf("reading the plan JSON: %w", err)
	}
	delete(top, "timestamp")
	canonical, err := json.Marshal(top) // map keys sorted
	if err != nil {
		return "", fmt.Errorf("rendering the plan JSON: %w", err)
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:]), nil
}
