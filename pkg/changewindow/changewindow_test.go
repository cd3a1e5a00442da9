package changewindow

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	magosv1 "github.com/magosfleet/magos/apis/v1alpha1"
)

func window(schedule string, d time.Duration, tz string) magosv1.ChangeWindow {
	return magosv1.ChangeWindow{Schedule: schedule, Duration: metav1.Duration{Duration: d}, TimeZone: tz}
}

func TestAt(t *testing.T) {
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	weekdays9to17 := window("0 9 * * 1-5", 8*time.Hour, "")
	tests := []struct {
		name    string
		windows []magosv1.ChangeWindow
		now     string
		open    bool
		closes  string
		opens   string
	}{
		{"no windows: always open", nil, "2026-12-05T03:00:00Z", true, "", ""},
		{"inside a weekday window", []magosv1.ChangeWindow{weekdays9to17}, "2026-12-03T10:30:00Z", true, "2026-12-03T17:00:00Z", ""},
		{"at the opening instant", []magosv1.ChangeWindow{weekdays9to17}, "2026-12-03T09:00:00Z", true, "2026-12-03T17:00:00Z", ""},
		{"at the closing instant: closed", []magosv1.ChangeWindow{weekdays9to17}, "2026-12-03T17:00:00Z", false, "", "2026-12-04T09:00:00Z"},
		{"friday evening waits for monday", []magosv1.ChangeWindow{weekdays9to17}, "2026-12-04T18:00:00Z", false, "", "2026-12-07T09:00:00Z"},
		{"a window across midnight", []magosv1.ChangeWindow{window("0 22 * * *", 4*time.Hour, "")}, "2026-12-04T01:00:00Z", true, "2026-12-04T02:00:00Z", ""},
		{"the earliest of two windows opens next", []magosv1.ChangeWindow{window("0 12 * * *", time.Hour, ""), window("30 6 * * *", time.Hour, "")}, "2026-12-03T02:00:00Z", false, "", "2026-12-03T06:30:00Z"},
		{"either of two windows opens it", []magosv1.ChangeWindow{window("0 12 * * *", time.Hour, ""), window("30 6 * * *", time.Hour, "")}, "2026-12-03T12:10:00Z", true, "2026-12-03T13:00:00Z", ""},
		{"a time zone: 09:00 in Tokyo is 00:00 UTC", []magosv1.ChangeWindow{window("0 9 * * *", time.Hour, "Asia/Tokyo")}, "2026-12-03T00:30:00Z", true, "2026-12-03T01:00:00Z", ""},
		{"a time zone with summer time: 09:00 in Paris in July is 07:00 UTC", []magosv1.ChangeWindow{window("0 9 * * *", time.Hour, "Europe/Paris")}, "2026-07-01T06:00:00Z", false, "", "2026-07-01T07:00:00Z"},
		{"@daily", []magosv1.ChangeWindow{window("@daily", 30*time.Minute, "")}, "2026-12-03T00:10:00Z", true, "2026-12-03T00:30:00Z", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, err := Parse(tt.windows)
			if err != nil {
				t.Fatal(err)
			}
			open, closes, opens, err := ws.At(utc(tt.now))
			if err != nil {
				t.Fatal(err)
			}
			if open != tt.open {
				t.Fatalf("open = %v, want %v", open, tt.open)
			}
			if tt.closes != "" && !closes.Equal(utc(tt.closes)) || tt.closes == "" && !closes.IsZero() {
				t.Errorf("closes = %v, want %q", closes, tt.closes)
			}
			if tt.opens != "" && !opens.Equal(utc(tt.opens)) || tt.opens == "" && !opens.IsZero() {
				t.Errorf("opens = %v, want %q", opens, tt.opens)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tt := range []struct {
		w    magosv1.ChangeWindow
		want string
	}{
		{window("61 * * * *", time.Hour, ""), `changeWindows[0]: schedule "61 * * * *"`},
		{window("* * * *", time.Hour, ""), "expected exactly 5 fields"},
		{window("0 9 * * *", time.Hour, "Mars/Olympus"), `unknown timeZone "Mars/Olympus"`},
		{window("CRON_TZ=UTC 0 9 * * *", time.Hour, ""), "names a time zone: use timeZone"},
		{window("0 9 * * *", 0, ""), "duration 0s is not positive"},
	} {
		if _, err := Parse([]magosv1.ChangeWindow{tt.w}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%+v) = %v, want an error with %q", tt.w, err, tt.want)
		}
	}
	ws, err := Parse([]magosv1.ChangeWindow{window("0 0 30 2 *", time.Hour, "")}) // 30 February
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := ws.At(time.Now()); !errors.Is(err, ErrNever) {
		t.Errorf("a window that never opens: %v, want ErrNever", err)
	}
}
