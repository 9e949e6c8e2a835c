//go:build !linux

package badger

// readAhead does nothing off Linux: the reads it saves are those of the
// MADV_RANDOM mapping logAdvisor sets, on Linux only.
func readAhead(string, int64) {}
