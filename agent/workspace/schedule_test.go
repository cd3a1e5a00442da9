package workspace

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
	"github.com/magosfleet/magos/pkg/keys"
)

func TestParseInterval(t *testing.T) {
	def, floor := 3*time.Minute, 10*time.Second
	tests := []struct {
		name        string
		value       string
		present     bool
		want        time.Duration
		wantProblem string
	}{
		{name: "unset uses the default", want: def},
		{name: "valid", value: "5m", present: true, want: 5 * time.Minute},
		{name: "compound", value: "1h30m", present: true, want: 90 * time.Minute},
		{name: "exactly the floor", value: "10s", present: true, want: floor},
		{name: "zero falls back to the default", value: "0s", present: true, want: def, wantProblem: `"0s" is not positive`},
		{name: "negative falls back to the default", value: "-1m", present: true, want: def, wantProblem: `"-1m" is not positive`},
		{name: "unparsable falls back to the default", value: "often", present: true, want: def, wantProblem: `"often" is not a duration`},
		{name: "empty value falls back to the default", value: "", present: true, want: def, wantProblem: `"" is not a duration`},
		{name: "below the floor is raised", value: "1s", present: true, want: floor, wantProblem: `"1s" is below the minimum of 10s`},
		{name: "nanoseconds are raised", value: "1ns", present: true, want: floor, wantProblem: "below the minimum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problem := ParseInterval(tt.value, tt.present, def, floor)
			if got != tt.want {
				t.Errorf("interval = %s, want %s", got, tt.want)
			}
			if tt.wantProblem == "" && problem != "" {
				t.Errorf("unexpected problem %q", problem)
			}
			if tt.wantProblem != "" && !strings.Contains(problem, tt.wantProblem) {
				t.Errorf("problem = %q, want it to contain %q", problem, tt.wantProblem)
			}
		})
	}
}

func TestComputeSchedule(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	tests := []struct {
		name     string
		in       ScheduleInput
		wantNext time.Time
		wantDue  bool
		wantIv   time.Duration
		invalid  string
	}{
		{
			name:     "first schedule is one interval from now, not due",
			in:       ScheduleInput{Now: now},
			wantNext: now.Add(3 * time.Minute), wantIv: 3 * time.Minute,
		},
		{
			name:     "before the tick: not due, tick kept",
			in:       ScheduleInput{Now: now, Next: at(time.Minute), ObservedInterval: "3m0s"},
			wantNext: now.Add(time.Minute), wantIv: 3 * time.Minute,
		},
		{
			name:     "tick reached: due, next tick one interval later (fixed cadence)",
			in:       ScheduleInput{Now: now, Next: at(0), ObservedInterval: "3m0s"},
			wantNext: now.Add(3 * time.Minute), wantDue: true, wantIv: 3 * time.Minute,
		},
		{
			name:     "ticks missed: due once, next tick on the cadence",
			in:       ScheduleInput{Now: now, Next: at(-7 * time.Minute), ObservedInterval: "3m0s"},
			wantNext: now.Add(2 * time.Minute), wantDue: true, wantIv: 3 * time.Minute,
		},
		{
			name: "shorter interval takes effect at once from the last tick",
			// Old cadence 10m, next tick in 4m: last tick 6m ago; new interval 5m: tick 1m ago: due.
			in:       ScheduleInput{Now: now, Next: at(4 * time.Minute), ObservedInterval: "10m0s", Interval: "5m", HasInterval: true},
			wantNext: now.Add(4 * time.Minute), wantDue: true, wantIv: 5 * time.Minute,
		},
		{
			name: "longer interval moves the tick later",
			// Old cadence 1m, next in 30s: last tick 30s ago; new 10m: next in 9m30s.
			in:       ScheduleInput{Now: now, Next: at(30 * time.Second), ObservedInterval: "1m0s", Interval: "10m", HasInterval: true},
			wantNext: now.Add(9*time.Minute + 30*time.Second), wantIv: 10 * time.Minute,
		},
		{
			name:     "a tick further than one interval away is pulled in",
			in:       ScheduleInput{Now: now, Next: at(48 * time.Hour), ObservedInterval: "3m0s"},
			wantNext: now.Add(3 * time.Minute), wantIv: 3 * time.Minute,
		},
		{
			name:     "zero interval never spins: default used",
			in:       ScheduleInput{Now: now, Next: at(-time.Hour), ObservedInterval: "3m0s", Interval: "0s", HasInterval: true},
			wantNext: now.Add(3 * time.Minute), wantDue: true, wantIv: 3 * time.Minute, invalid: "0s",
		},
		{
			name:     "negative interval never spins: default used",
			in:       ScheduleInput{Now: now, Next: at(-time.Hour), ObservedInterval: "3m0s", Interval: "-1m", HasInterval: true},
			wantNext: now.Add(3 * time.Minute), wantDue: true, wantIv: 3 * time.Minute, invalid: "-1m",
		},
		{
			name:     "tiny interval raised to the floor",
			in:       ScheduleInput{Now: now, Next: at(-time.Hour), ObservedInterval: "10s", Interval: "1ns", HasInterval: true},
			wantNext: now.Add(10 * time.Second), wantDue: true, wantIv: 10 * time.Second, invalid: "1ns",
		},
		{
			name:     "unparsable observed interval is not remapped",
			in:       ScheduleInput{Now: now, Next: at(time.Minute), ObservedInterval: "bogus"},
			wantNext: now.Add(time.Minute), wantIv: 3 * time.Minute,
		},
		{
			name:     "custom default and floor",
			in:       ScheduleInput{Now: now, Default: time.Minute, Floor: 2 * time.Second, Interval: "1s", HasInterval: true},
			wantNext: now.Add(2 * time.Second), wantIv: 2 * time.Second, invalid: "1s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ComputeSchedule(tt.in)
			if !s.Next.Equal(tt.wantNext) {
				t.Errorf("next = %s, want %s", s.Next.Sub(now), tt.wantNext.Sub(now))
			}
			if s.Due != tt.wantDue {
				t.Errorf("due = %v, want %v", s.Due, tt.wantDue)
			}
			if s.Interval != tt.wantIv {
				t.Errorf("interval = %s, want %s", s.Interval, tt.wantIv)
			}
			if s.Invalid != tt.invalid {
				t.Errorf("invalid = %q, want %q", s.Invalid, tt.invalid)
			}
			if !s.Next.After(now) {
				t.Errorf("next %s is not after now", s.Next)
			}
		})
	}
}

// BenchmarkComputeSchedule shows the schedule costs the same whatever the gap to cover (no
// loops, unlike upstream's).
func BenchmarkComputeSchedule(b *testing.B) {
	now := time.Now()
	old := now.Add(-365 * 24 * time.Hour)
	in := ScheduleInput{Now: now, Next: &old, ObservedInterval: "10s", Interval: "10s", HasInterval: true}
	for b.Loop() {
		_ = ComputeSchedule(in)
	}
}

// TestDriftNext: when a Workspace's next drift check is due, first match wins.
func TestDriftNext(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	checked := &metav1.Time{Time: now.Add(-10 * time.Minute)}
	every := &magosv1.DriftDetectionSpec{Interval: metav1.Duration{Duration: time.Hour}}
	cases := []struct {
		name      string
		spec      *magosv1.DriftDetectionSpec
		phase     magosv1.Phase
		drift     *magosv1.DriftStatus
		requested bool
		want      time.Time
		checks    bool
	}{
		{name: "no drift detection", phase: magosv1.PhaseApplied},
		{name: "not applied yet", spec: every, phase: magosv1.PhasePending},
		{name: "planned, not applied", spec: every, phase: magosv1.PhasePlanned, drift: &magosv1.DriftStatus{Revision: "a", CheckedAt: checked}},
		{name: "failed run", spec: every, phase: magosv1.PhaseFailed},
		{name: "never checked", spec: every, phase: magosv1.PhaseApplied, want: now, checks: true},
		{name: "first check running", spec: every, phase: magosv1.PhaseApplied, drift: &magosv1.DriftStatus{Result: magosv1.DriftResultChecking}, want: now, checks: true},
		{name: "checked another commit", spec: every, phase: magosv1.PhaseApplied, drift: &magosv1.DriftStatus{Revision: "b", CheckedAt: checked}, want: now, checks: true},
		{name: "checked this commit", spec: every, phase: magosv1.PhaseApplied, drift: &magosv1.DriftStatus{Revision: "a", CheckedAt: checked}, want: checked.Add(time.Hour), checks: true},
		{name: "requested", spec: every, phase: magosv1.PhaseApplied, drift: &magosv1.DriftStatus{Revision: "a", CheckedAt: checked}, requested: true, want: now, checks: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws := &magosv1.Workspace{}
			ws.Spec.DriftDetection = tc.spec
			ws.Status.Phase, ws.Status.ObservedRevision, ws.Status.Drift = tc.phase, "a", tc.drift
			if tc.requested {
				ws.Annotations = map[string]string{keys.CheckDrift: "now"}
			}
			got, checks := driftNext(ws, now)
			if checks != tc.checks || !got.Equal(tc.want) {
				t.Fatalf("driftNext = %v, %v; want %v, %v", got, checks, tc.want, tc.checks)
			}
		})
	}
}
