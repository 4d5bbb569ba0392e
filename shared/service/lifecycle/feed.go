package lifecycle

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openatf/atf/shared/task"
)

// DefaultFeedSize is how many of the latest events a Feed keeps: at most a few MiB (an event is a
// few hundred bytes, and at most task.MaxErrorBytes more with its error).
const DefaultFeedSize = 2048

// MaxFeedPage bounds the events of one Read.
const MaxFeedPage = 500

// Feed keeps the latest events of one process, in memory, in a ring of fixed size, and lets
// readers follow them from a cursor, waiting for the next: atf dev's live feed (the API's GET
// /v1/lambdas/{lambda}/events, which `atf tail` reads). A reader that falls behind by more than
// the ring misses events, and is told how many. It is not a bus: it holds the writes of its own
// process only, and forgets them when it ends. On AWS there is no such process; the events are
// on EventBridge.
//
// Publish costs an append under a lock, with or without readers.
type Feed struct {
	epoch string // tells the cursors of this feed from those of an earlier process

	mu   sync.Mutex
	ring []Event
	next uint64        // the sequence number of the next event; ring[seq % len] holds seq
	wake chan struct{} // closed at the next Publish, if a reader waits
}

// NewFeed returns a feed keeping the latest size events (DefaultFeedSize if size ≤ 0).
func NewFeed(size int) *Feed {
	if size <= 0 {
		size = DefaultFeedSize
	}
	return &Feed{epoch: strconv.FormatInt(time.Now().UnixNano(), 36), ring: make([]Event, size)}
}

// Publish keeps e, dropping the oldest event if the ring is full. It never blocks.
func (f *Feed) Publish(e Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ring[f.next%uint64(len(f.ring))] = e
	f.next++
	if f.wake != nil {
		close(f.wake)
		f.wake = nil
	}
}

// FeedPage is what a Read found.
type FeedPage struct {
	Events []Event `json:"events"`
	// NextCursor is where the next Read goes on from.
	NextCursor string `json:"next_cursor"`
	// Missed counts the events, of any lambda, that went out of the ring before this read
	// reached them (or, for a cursor of an earlier process, that this one holds no more).
	Missed uint64 `json:"missed,omitempty"`
}

// FromNow is the cursor of a read of the events published after it, none before.
const FromNow = "now"

// Read returns the lambda's events after cursor, at most limit (MaxFeedPage if ≤ 0 or more), in
// the order they were published. An empty cursor reads from the oldest event the ring holds;
// FromNow from the next one. If there is none yet, it waits up to wait for one, or for ctx.
func (f *Feed) Read(ctx context.Context, lambda, cursor string, limit int, wait time.Duration) (FeedPage, error) {
	if limit <= 0 || limit > MaxFeedPage {
		limit = MaxFeedPage
	}
	f.mu.Lock()
	seq, missed, err := f.start(cursor)
	f.mu.Unlock()
	if err != nil {
		return FeedPage{}, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	page := FeedPage{Events: []Event{}, Missed: missed}
	for {
		f.mu.Lock()
		if oldest := f.oldest(); seq < oldest { // overrun while waiting
			page.Missed += oldest - seq
			seq = oldest
		}
		for ; seq < f.next && len(page.Events) < limit; seq++ {
			if e := f.ring[seq%uint64(len(f.ring))]; e.Lambda == lambda {
				page.Events = append(page.Events, e)
			}
		}
		page.NextCursor = f.epoch + "." + strconv.FormatUint(seq, 10)
		if len(page.Events) > 0 || page.Missed > 0 || wait <= 0 {
			f.mu.Unlock()
			return page, nil
		}
		if f.wake == nil {
			f.wake = make(chan struct{})
		}
		wake := f.wake
		f.mu.Unlock()
		select {
		case <-wake:
		case <-timer.C:
			wait = 0 // one more look, then answer
		case <-ctx.Done():
			return page, nil
		}
	}
}

// start is where a read from cursor starts, and how many events it missed. f.mu is held.
func (f *Feed) start(cursor string) (seq, missed uint64, err error) {
	switch cursor {
	case "":
		return f.oldest(), 0, nil
	case FromNow:
		return f.next, 0, nil
	}
	epoch, n, ok := strings.Cut(cursor, ".")
	seq, perr := strconv.ParseUint(n, 10, 64)
	if !ok || perr != nil {
		return 0, 0, task.Errorf(task.ErrInvalid, "cursor %q is not a cursor of the events feed", task.Echo(cursor))
	}
	if epoch != f.epoch || seq > f.next {
		// A cursor of a process that has ended: this one's events are all new to the reader.
		return f.oldest(), f.oldest(), nil
	}
	if oldest := f.oldest(); seq < oldest {
		return oldest, oldest - seq, nil
	}
	return seq, 0, nil
}

// oldest is the sequence number of the oldest event the ring holds. f.mu is held.
func (f *Feed) oldest() uint64 {
	if size := uint64(len(f.ring)); f.next > size {
		return f.next - size
	}
	return 0
}

// Publishers hands each event to each of its publishers, in order.
type Publishers []Publish

// Publish hands e to each publisher.
func (ps Publishers) Publish(e Event) {
	for _, p := range ps {
		p.Publish(e)
	}
}
