package server

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

func TestLazyDeadline(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKey{}, "v")

	t.Run("ends at its deadline without anyone waiting on Done", func(t *testing.T) {
		c := newLazyDeadline(parent, time.Now().Add(20*time.Millisecond))
		defer c.stop()
		if err := c.Err(); err != nil {
			t.Fatalf("Err before the deadline = %v", err)
		}
		time.Sleep(30 * time.Millisecond)
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err after the deadline = %v, want DeadlineExceeded", err)
		}
		if c.made.Load() {
			t.Fatal("a timer was made though nobody asked for Done")
		}
	})

	t.Run("Done closes at the deadline", func(t *testing.T) {
		c := newLazyDeadline(parent, time.Now().Add(20*time.Millisecond))
		defer c.stop()
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed at the deadline")
		}
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err = %v, want DeadlineExceeded", err)
		}
	})

	t.Run("stop cancels, before or after Done was asked for", func(t *testing.T) {
		for _, waited := range []bool{false, true} {
			c := newLazyDeadline(parent, time.Now().Add(time.Hour))
			if waited {
				_ = c.Done()
			}
			c.stop()
			if err := c.Err(); !errors.Is(err, context.Canceled) {
				t.Fatalf("waited %v: Err after stop = %v, want Canceled", waited, err)
			}
			select {
			case <-c.Done():
			default:
				t.Fatalf("waited %v: Done open after stop", waited)
			}
		}
	})

	t.Run("follows its parent and keeps its values and deadline", func(t *testing.T) {
		p, cancel := context.WithCancel(parent)
		dl := time.Now().Add(time.Hour)
		c := newLazyDeadline(p, dl)
		defer c.stop()
		if got, _ := c.Value(ctxKey{}).(string); got != "v" {
			t.Fatalf("Value = %q", got)
		}
		if d, ok := c.Deadline(); !ok || !d.Equal(dl) {
			t.Fatalf("Deadline = %v %v", d, ok)
		}
		cancel()
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err after the parent's cancel = %v", err)
		}
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed after the parent's cancel")
		}
	})
}
