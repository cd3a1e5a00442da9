package message

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"short stays", "abc", 10, "abc"},
		{"exact stays", "0123456789", 10, "0123456789"},
		{"long is cut and marked", "0123456789abcdef", 10, "0123 [...]"},
		{"never inside a rune", "ab€€€€", 10, "ab [...]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Truncate(tc.in, tc.n)
			if got != tc.want {
				t.Fatalf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
			if len(got) > tc.n || !utf8.ValidString(got) {
				t.Fatalf("Truncate(%q, %d) = %q: longer than %d bytes or not UTF-8", tc.in, tc.n, got, tc.n)
			}
		})
	}
	long := strings.Repeat("é", 1000)
	for n := 7; n < 40; n++ {
		if got := Truncate(long, n); len(got) > n || !utf8.ValidString(got) {
			t.Fatalf("Truncate(é×1000, %d) = %q", n, got)
		}
	}
}

func TestOr(t *testing.T) {
	if Or("", "def") != "def" || Or("msg", "def") != "msg" {
		t.Fatal("Or does not choose the message over the default")
	}
}
