package scalebench

import (
	"strings"
	"testing"
	"time"
)

func TestCheckStepOrder(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	run := func(key string, granted, applied float64) Record {
		c, w, _ := strings.Cut(key, "/")
		return Record{Cluster: c, Workspace: w, Commit: commit, Granted: at(granted), Applied: at(applied)}
	}
	steps := [][]string{{"a/1", "b/1"}, {"c/1"}, {"d/1", "e/1"}}
	inOrder := []Record{run("a/1", 0, 1), run("b/1", 0, 2), run("c/1", 3, 4), run("d/1", 5, 6), run("e/1", 5, 5.5)}
	cases := []struct {
		name string
		runs []Record
		want string // a part of the error; empty: no error
	}{
		{name: "in step order", runs: inOrder},
		{name: "a step granted before the previous one applied",
			runs: []Record{run("a/1", 0, 1), run("b/1", 0, 3.5), run("c/1", 3, 4), run("d/1", 5, 6), run("e/1", 5, 5.5)},
			want: "c/1 (step 2) was granted"},
		{name: "the last step granted before the first one applied",
			runs: []Record{run("a/1", 0, 1), run("b/1", 0, 5.5), run("c/1", 3, 4), run("d/1", 5, 6), run("e/1", 7, 8)},
			want: "(step 3) was granted"},
		{name: "a Workspace ran twice",
			runs: append(inOrder[:len(inOrder):len(inOrder)], run("d/1", 7, 8)), want: "d/1 (step 3) ran 01234567 2 times"},
		{name: "a Workspace never ran", runs: inOrder[:4], want: "e/1 (step 3) ran 01234567 0 times"},
		{name: "a Workspace of no step ran", runs: append(inOrder[:len(inOrder):len(inOrder)], run("z/1", 9, 9)), want: "z/1 ran 01234567 but is in no step"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckStepOrder(commit, tc.runs, steps)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckStepOrder: %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("CheckStepOrder: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	s := func(ns ...int) []time.Duration {
		var out []time.Duration
		for _, n := range ns {
			out = append(out, time.Duration(n)*time.Second)
		}
		return out
	}
	cases := []struct {
		ds   []time.Duration
		q    float64
		want time.Duration
	}{
		{ds: nil, q: 0.9, want: 0},
		{ds: s(7), q: 0.5, want: 7 * time.Second},
		{ds: s(10, 1, 9, 2, 8, 3, 7, 4, 6, 5), q: 0.9, want: 9 * time.Second},
		{ds: s(10, 1, 9, 2, 8, 3, 7, 4, 6, 5), q: 0.5, want: 5 * time.Second},
		{ds: s(10, 1, 9, 2, 8, 3, 7, 4, 6, 5), q: 1, want: 10 * time.Second},
		{ds: s(1, 2, 3), q: 0.9, want: 3 * time.Second},
	}
	for _, tc := range cases {
		if got := Percentile(tc.ds, tc.q); got != tc.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tc.ds, tc.q, got, tc.want)
		}
	}
}
