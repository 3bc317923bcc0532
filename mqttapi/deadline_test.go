package mqttapi

import (
	"testing"
	"time"
)

// TestStoreDeadlines: every context handed out ends between storeTimeout
// and storeTimeout+storeDeadlineStep from when it was handed out, and
// calls within a step share one.
func TestStoreDeadlines(t *testing.T) {
	var d storeDeadlines
	before := time.Now()
	a := d.get()
	b := d.get()
	if a != b {
		t.Error("two calls within a step got two contexts")
	}
	dl, ok := b.Deadline()
	if !ok {
		t.Fatal("no deadline")
	}
	if lo, hi := before.Add(storeTimeout), time.Now().Add(storeTimeout+storeDeadlineStep); dl.Before(lo) || dl.After(hi) {
		t.Errorf("deadline %v, want between %v and %v", dl, lo, hi)
	}
	d.cur.Load().until = time.Now().Add(-time.Millisecond) // the step has passed
	if c := d.get(); c == a {
		t.Error("a context handed out past its step")
	} else if dl2, _ := c.Deadline(); !dl2.After(dl) {
		t.Errorf("the next context ends at %v, not after %v", dl2, dl)
	}
	if a.Err() != nil {
		t.Errorf("a context ended early: %v", a.Err())
	}
}
