// Package message shapes the human-readable messages the hub and the agent write into
// statuses, conditions and records: bounded in size, never empty.
package message

// truncated marks where Truncate cut a message.
const truncated = " [...]"

// Truncate cuts s to at most n bytes (n > len(" [...]")), marking the cut, and never inside a
// UTF-8 sequence.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := s[:max(0, n-len(truncated))]
	// Back off to the start of the last rune, and drop it: it may be incomplete.
	for len(cut) > 0 && cut[len(cut)-1]&0xC0 == 0x80 {
		cut = cut[:len(cut)-1]
	}
	if len(cut) > 0 && cut[len(cut)-1] >= 0xC0 {
		cut = cut[:len(cut)-1]
	}
	return cut + truncated
}

// Or returns msg, or def when msg is empty.
func Or(msg, def string) string {
	if msg == "" {
		return def
	}
	return msg
}
