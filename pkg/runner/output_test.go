package runner_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/magosfleet/magos/pkg/runner"
)

// framed is a run's output: lines before the plan, the framed plan, lines after.
func framed(before, plan, after string) string {
	return before + runner.PlanTextBegins + "\n" + plan + runner.PlanTextEnds + "\n" + after
}

func TestReadOutput(t *testing.T) {
	bigPlan := strings.Repeat("  + resource \"x\" é\n", 400) // 8,400 bytes, with two-byte runes
	bigLog := strings.Repeat("line of the log\n", 1000)      // 16,000 bytes
	for _, tc := range []struct {
		name          string
		in            string
		limits        runner.OutputLimits
		wantPlan      string // exact, unless truncated
		planTruncated bool
		logTruncated  bool
		logHas        []string
	}{
		{
			name:     "plan framed, log whole",
			in:       framed("Initializing...\n", "Plan: 1 to add.\n", "Result: ok\n"),
			wantPlan: "Plan: 1 to add.\n",
			logHas:   []string{"Initializing...", runner.PlanTextBegins, "Plan: 1 to add.", "Result: ok"},
		},
		{
			name:   "no frame, no plan text",
			in:     "Apply complete!\n",
			logHas: []string{"Apply complete!"},
		},
		{
			name:     "a frame that never ends keeps what followed",
			in:       "init\n" + runner.PlanTextBegins + "\nError: boom\n",
			wantPlan: "Error: boom\n",
		},
		{
			name:     "the last frame wins",
			in:       framed("", "first\n", "") + framed("", "second\n", ""),
			wantPlan: "second\n",
		},
		{
			name:     "CRLF frames are recognised",
			in:       "a\r\n" + runner.PlanTextBegins + "\r\nplan\r\n" + runner.PlanTextEnds + "\r\n",
			wantPlan: "plan\r\n",
		},
		{
			name:          "plan over its cap keeps its beginning, marked",
			in:            framed("", bigPlan, ""),
			limits:        runner.OutputLimits{PlanText: 1001},
			planTruncated: true,
		},
		{
			name:         "log over its cap keeps its end from a whole line, marked",
			in:           bigLog + "the last line\n",
			limits:       runner.OutputLimits{LogTail: 1000},
			logTruncated: true,
			logHas:       []string{runner.TruncatedMark, "the last line"},
		},
		{
			name:   "no final newline",
			in:     "only line",
			logHas: []string{"only line"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runner.ReadOutput(strings.NewReader(tc.in), tc.limits)
			if err != nil {
				t.Fatal(err)
			}
			if out.Bytes != int64(len(tc.in)) {
				t.Errorf("Bytes = %d, want %d", out.Bytes, len(tc.in))
			}
			if out.PlanTruncated != tc.planTruncated || out.LogTruncated != tc.logTruncated {
				t.Errorf("truncated plan %v log %v, want %v %v", out.PlanTruncated, out.LogTruncated, tc.planTruncated, tc.logTruncated)
			}
			if tc.planTruncated {
				if !strings.HasSuffix(out.PlanText, runner.TruncatedMark+"\n") || !strings.HasPrefix(bigPlan, strings.TrimSuffix(out.PlanText, runner.TruncatedMark+"\n")) {
					t.Errorf("truncated plan is not the beginning of the plan, marked: %q", out.PlanText)
				}
				if len(out.PlanText) > tc.limits.PlanText+len(runner.TruncatedMark)+2 || !utf8.ValidString(out.PlanText) {
					t.Errorf("truncated plan is %d bytes (cap %d) or not UTF-8", len(out.PlanText), tc.limits.PlanText)
				}
			} else if out.PlanText != tc.wantPlan {
				t.Errorf("PlanText = %q, want %q", out.PlanText, tc.wantPlan)
			}
			if tc.logTruncated {
				if !strings.HasPrefix(out.Log, runner.TruncatedMark+"\nline of the log\n") || len(out.Log) > tc.limits.LogTail+len(runner.TruncatedMark)+1 {
					t.Errorf("log tail is %d bytes (cap %d), starting %q", len(out.Log), tc.limits.LogTail, out.Log[:min(60, len(out.Log))])
				}
			} else if out.Log != tc.in {
				t.Errorf("Log = %q, want the whole output", out.Log)
			}
			for _, s := range tc.logHas {
				if !strings.Contains(out.Log, s) {
					t.Errorf("log has no %q", s)
				}
			}
		})
	}
}

// A line longer than the reader's buffer is read whole.
func TestReadOutputLongLine(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	out, err := runner.ReadOutput(strings.NewReader(framed("", long+"\n", "")), runner.OutputLimits{PlanText: 1 << 20, LogTail: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if out.PlanText != long+"\n" {
		t.Fatalf("plan text is %d bytes, want %d", len(out.PlanText), len(long)+1)
	}
}

func BenchmarkReadOutput(b *testing.B) {
	var sb strings.Builder
	for i := range 100000 {
		fmt.Fprintf(&sb, "2026-12-05T03:00:00Z line %d of a long apply log\n", i)
	}
	in := framed("", sb.String(), sb.String())
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := runner.ReadOutput(strings.NewReader(in), runner.OutputLimits{}); err != nil {
			b.Fatal(err)
		}
	}
}
