package controller

import (
	"slices"
	"time"

	"github.com/openatf/atf/shared/task"
)

// held is a received message waiting in the buffer for a slot.
type held struct {
	d           task.Delivery
	prio        int       // index of its priority in Lambda.Priorities: 0 is the highest
	hiddenUntil time.Time // when its visibility runs out unless extended
}

// buffer holds received messages by priority, oldest first within a priority. It is not safe for
// concurrent use; the controller guards it with its mutex.
type buffer struct {
	byPrio [][]*held
	n      int
}

func newBuffer(priorities int) buffer { return buffer{byPrio: make([][]*held, priorities)} }

func (b *buffer) len() int { return b.n }

func (b *buffer) push(h *held) {
	b.byPrio[h.prio] = append(b.byPrio[h.prio], h)
	b.n++
}

// best returns the index of the highest priority held, or the number of priorities if empty.
func (b *buffer) best() int {
	for i, hs := range b.byPrio {
		if len(hs) > 0 {
			return i
		}
	}
	return len(b.byPrio)
}

// pop takes the oldest message of the highest priority held; the buffer must not be empty.
func (b *buffer) pop() *held {
	i := b.best()
	h := b.byPrio[i][0]
	b.byPrio[i] = b.byPrio[i][1:]
	b.n--
	return h
}

// remove takes h out, and reports whether it was there.
func (b *buffer) remove(h *held) bool {
	hs := b.byPrio[h.prio]
	i := slices.Index(hs, h)
	if i < 0 {
		return false
	}
	b.byPrio[h.prio] = slices.Delete(hs, i, i+1)
	b.n--
	return true
}

// expiring returns the messages hidden until before t.
func (b *buffer) expiring(t time.Time) []*held {
	var hs []*held
	for _, p := range b.byPrio {
		for _, h := range p {
			if h.hiddenUntil.Before(t) {
				hs = append(hs, h)
			}
		}
	}
	return hs
}

// drain empties the buffer and returns what it held.
func (b *buffer) drain() []*held {
	var hs []*held
	for i, p := range b.byPrio {
		hs = append(hs, p...)
		b.byPrio[i] = nil
	}
	b.n = 0
	return hs
}
