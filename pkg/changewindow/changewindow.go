// Package changewindow reads a Rollout's change windows (spec.changeWindows: a cron schedule of
// when each window opens, how long it stays open, and the time zone of the schedule) and tells
// whether a window is open at a given time, and when the next one opens. The cron schedules are
// parsed by github.com/robfig/cron/v3 (five fields, or descriptors such as @daily); time zones
// come from the system's database, else the one embedded in this package (time/tzdata), so the
// answer is the same on a distroless image.
package changewindow

import (
	"errors"
	"fmt"
	"time"
	_ "time/tzdata" // time zones on images without a zoneinfo database

	"github.com/robfig/cron/v3"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

// parser reads the five-field form and descriptors; no seconds field, as in Kubernetes CronJobs.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Window is one parsed change window.
type Window struct {
	schedule cron.Schedule
	duration time.Duration
	location *time.Location
}

// Windows are a Rollout's parsed change windows. No windows means always open.
type Windows []Window

// Parse reads change windows. It fails, naming the window, on a schedule cron cannot read, an
// unknown time zone, a time zone written inside the schedule (CRON_TZ= or TZ=: use timeZone) or
// a duration that is not positive.
func Parse(specs []magosv1.ChangeWindow) (Windows, error) {
	out := make(Windows, 0, len(specs))
	for i, s := range specs {
		loc := time.UTC
		if s.TimeZone != "" {
			l, err := time.LoadLocation(s.TimeZone)
			if err != nil {
				return nil, fmt.Errorf("changeWindows[%d]: unknown timeZone %q", i, s.TimeZone)
			}
			loc = l
		}
		if len(s.Schedule) > 3 && (s.Schedule[:3] == "TZ=" || len(s.Schedule) > 8 && s.Schedule[:8] == "CRON_TZ=") {
			return nil, fmt.Errorf("changeWindows[%d]: schedule %q names a time zone: use timeZone", i, s.Schedule)
		}
		sched, err := parser.Parse(s.Schedule)
		if err != nil {
			return nil, fmt.Errorf("changeWindows[%d]: schedule %q: %w", i, s.Schedule, err)
		}
		if s.Duration.Duration <= 0 {
			return nil, fmt.Errorf("changeWindows[%d]: duration %s is not positive", i, s.Duration.Duration)
		}
		out = append(out, Window{schedule: sched, duration: s.Duration.Duration, location: loc})
	}
	return out, nil
}

// ErrNever is returned by At when no window ever opens (a schedule that never fires, such as
// the 30th of February).
var ErrNever = errors.New("no change window ever opens")

// At tells whether a window is open at now. When one is, closes is when the earliest-started
// open window of each schedule closes, the latest of those (ask again then: an overlapping
// window may keep it open); when none is, opens is when the next one opens. With no windows it
// is always open (closes is zero). Times are in UTC.
func (ws Windows) At(now time.Time) (open bool, closes, opens time.Time, err error) {
	if len(ws) == 0 {
		return true, time.Time{}, time.Time{}, nil
	}
	for _, w := range ws {
		local := now.In(w.location)
		// The first start after now-duration is the start of a window open at now ([start,
		// start+duration) holds now), if it is not after now.
		start := w.schedule.Next(local.Add(-w.duration))
		switch {
		case start.IsZero():
			continue // never fires
		case !start.After(local):
			open = true
			if end := start.Add(w.duration); end.After(closes) {
				closes = end
			}
		case opens.IsZero() || start.Before(opens):
			opens = start
		}
	}
	if open {
		return true, closes.UTC(), time.Time{}, nil
	}
	if opens.IsZero() {
		return false, time.Time{}, time.Time{}, ErrNever
	}
	return false, time.Time{}, opens.UTC(), nil
}
