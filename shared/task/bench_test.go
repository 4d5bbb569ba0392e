package task

import (
	"testing"
	"time"
)

// BenchmarkTransitions runs a task through its life, each transition a pure function: new,
// enqueue, claim, start (the first heartbeat), success.
func BenchmarkTransitions(b *testing.B) {
	l := Lambda{Name: "bench"}.WithDefaults()
	c := Config{}.WithDefaults()
	now := time.Now().UTC()
	b.ReportAllocs()
	for b.Loop() {
		t, err := New(Spec{Payload: []byte(`{"to":"a@example.com"}`)}, l, now, c)
		if err != nil {
			b.Fatal(err)
		}
		if t, err = Enqueue(t, now, c); err != nil {
			b.Fatal(err)
		}
		if t, err = Claim(t, "lease", now, c); err != nil {
			b.Fatal(err)
		}
		if t, err = Heartbeat(t, "lease", now, c); err != nil {
			b.Fatal(err)
		}
		if _, err = Succeed(t, "lease", nil, now, c); err != nil {
			b.Fatal(err)
		}
	}
}
