//go:build !linux

package badger

// logAdvisor does nothing off Linux: the large-folio write-back it works
// around is Linux's.
type logAdvisor struct{}

func newLogAdvisor(string) *logAdvisor { return &logAdvisor{} }

func (*logAdvisor) advise() (int, error) { return 0, nil }
