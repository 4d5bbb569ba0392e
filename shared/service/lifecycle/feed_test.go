package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func feedEvent(lambda string, n int) Event {
	return Event{ID: fmt.Sprintf("%s/t%d/1", lambda, n), Lambda: lambda, TaskID: fmt.Sprintf("t%d", n), Type: Scheduled}
}

func ids(p FeedPage) []string {
	var out []string
	for _, e := range p.Events {
		out = append(out, e.TaskID)
	}
	return out
}

// TestFeed: a read gets its lambda's events after its cursor, in order, at most a page; a reader
// overrun by the ring is told how many events it missed; a cursor of another process starts
// over; FromNow skips what the ring holds.
func TestFeed(t *testing.T) {
	ctx := context.Background()
	f := NewFeed(4)
	f.Publish(feedEvent("a", 1))
	f.Publish(feedEvent("b", 2))
	f.Publish(feedEvent("a", 3))
	p, err := f.Read(ctx, "a", "", 1, 0)
	if err != nil || fmt.Sprint(ids(p)) != "[t1]" || p.Missed != 0 {
		t.Fatalf("first page: %v %v %+v", ids(p), err, p)
	}
	p, _ = f.Read(ctx, "a", p.NextCursor, 0, 0)
	if fmt.Sprint(ids(p)) != "[t3]" {
		t.Fatalf("second page: %v", ids(p))
	}
	cursor := p.NextCursor
	if p, _ = f.Read(ctx, "a", cursor, 0, 0); len(p.Events) != 0 || p.NextCursor != cursor {
		t.Fatalf("nothing new: %v, cursor %s", ids(p), p.NextCursor)
	}
	for i := 4; i <= 9; i++ { // 6 more events overrun a ring of 4 by 2
		f.Publish(feedEvent("a", i))
	}
	if p, _ = f.Read(ctx, "a", cursor, 0, 0); p.Missed != 2 || fmt.Sprint(ids(p)) != "[t6 t7 t8 t9]" {
		t.Fatalf("overrun: %v, missed %d", ids(p), p.Missed)
	}
	if p, _ = f.Read(ctx, "a", "0.3", 0, 0); p.Missed != 5 || len(p.Events) != 4 {
		t.Fatalf("another process's cursor: %v, missed %d", ids(p), p.Missed)
	}
	if p, _ = f.Read(ctx, "a", FromNow, 0, 0); len(p.Events) != 0 {
		t.Fatalf("from now: %v", ids(p))
	}
	if _, err := f.Read(ctx, "a", "garbage", 0, 0); err == nil {
		t.Fatal("a malformed cursor was taken")
	}
}

// TestFeedWaits: a read with nothing new waits for the next event of its lambda, past those of
// other lambdas, and answers empty with its cursor when the wait ends.
func TestFeedWaits(t *testing.T) {
	f := NewFeed(0)
	got := make(chan FeedPage)
	go func() {
		p, _ := f.Read(context.Background(), "a", FromNow, 0, time.Minute)
		got <- p
	}()
	// The reader may not have started yet: publish until it answers, b's events first.
	for i := 0; ; i++ {
		f.Publish(feedEvent("b", i))
		f.Publish(feedEvent("a", i))
		select {
		case p := <-got:
			if len(p.Events) == 0 || p.Events[0].Lambda != "a" {
				t.Fatalf("woke with %+v", p)
			}
			p, _ = f.Read(context.Background(), "a", p.NextCursor, 0, 10*time.Millisecond)
			if len(p.Events) != 0 || p.NextCursor == "" {
				t.Fatalf("after the wait: %+v", p)
			}
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}
