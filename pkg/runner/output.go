package runner

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// The runner frames the output of `tofu plan` between these two lines on its stdout, so that the
// plan text can be told apart from the rest of the run's log (ReadOutput). They are display
// aids only: nothing the agent decides comes from the log.
const (
	PlanTextBegins = "::magos:: plan text begins"
	PlanTextEnds   = "::magos:: plan text ends"
)

// Default caps of ReadOutput, in bytes of text (before compression).
const (
	DefaultMaxPlanText = 512 << 10
	DefaultMaxLogTail  = 128 << 10
)

// TruncatedMark ends a plan text that was cut at its cap, and starts a log tail whose beginning
// was dropped.
const TruncatedMark = "[... truncated by magos ...]"

// OutputLimits caps what ReadOutput keeps.
type OutputLimits struct {
	// PlanText caps the plan text (default DefaultMaxPlanText): its beginning is kept.
	PlanText int
	// LogTail caps the log (default DefaultMaxLogTail): its end is kept.
	LogTail int
}

// Output is what ReadOutput kept of a run's output.
type Output struct {
	// PlanText is the output of the plan command, without the frame lines; empty when the run
	// printed none (an apply, or a plan that failed before planning).
	PlanText string
	// PlanTruncated says PlanText was cut at its cap (it then ends with TruncatedMark).
	PlanTruncated bool
	// Log is the end of the whole output, frame lines included.
	Log string
	// LogTruncated says the beginning of the log was dropped (Log then starts with
	// TruncatedMark).
	LogTruncated bool
	// Bytes is the size of the whole output read.
	Bytes int64
}

// ReadOutput reads a run's output (its log: the runner's stdout and stderr) to the end and
// keeps the framed plan text, up to its cap, and the log's tail, up to its cap. Lines longer
// than the caps are cut.
func ReadOutput(r io.Reader, limits OutputLimits) (Output, error) {
	if limits.PlanText <= 0 {
		limits.PlanText = DefaultMaxPlanText
	}
	if limits.LogTail <= 0 {
		limits.LogTail = DefaultMaxLogTail
	}
	var (
		out    Output
		plan   strings.Builder
		inPlan bool
		tail   = &tailBuffer{max: limits.LogTail}
	)
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A line longer than the buffer: take it in pieces.
			err = nil
		}
		out.Bytes += int64(len(line))
		if len(line) > 0 {
			_, _ = tail.Write(line)
			trimmed := string(bytes.TrimRight(line, "\r\n"))
			switch {
			case trimmed == PlanTextBegins:
				inPlan = true
				plan.Reset()
				out.PlanTruncated = false
			case trimmed == PlanTextEnds:
				inPlan = false
			case inPlan && !out.PlanTruncated:
				if plan.Len()+len(line) <= limits.PlanText {
					plan.Write(line)
					break
				}
				// Keep whole lines; only a first line longer than the cap is cut.
				out.PlanTruncated = true
				if plan.Len() == 0 {
					cut := line[:limits.PlanText]
					for len(cut) > 0 && !utf8.Valid(cut) { // never end inside a rune
						cut = cut[:len(cut)-1]
					}
					plan.Write(cut)
					plan.WriteByte('\n')
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return out, fmt.Errorf("reading the run's output: %w", err)
		}
	}
	out.PlanText = plan.String()
	if out.PlanTruncated {
		out.PlanText += TruncatedMark + "\n"
	}
	b := tail.Bytes()
	if out.LogTruncated = tail.Truncated(); out.LogTruncated {
		if i := bytes.IndexByte(b, '\n'); i >= 0 && i < len(b)-1 {
			b = b[i+1:] // start at a whole line
		}
		out.Log = TruncatedMark + "\n" + string(b)
	} else {
		out.Log = string(b)
	}
	return out, nil
}
