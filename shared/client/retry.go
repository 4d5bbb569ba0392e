package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Retries: a request that is safe to send again is sent again when its connection failed (the
// server closed it while idle, a reset, a refused dial; not a request that could not be signed,
// which was never sent) or the server answered 503 or 429, with
// backoff (or the Retry-After the server asked for, when longer), up to MaxAttempts tries in all
// and never past the caller's context. Safe are the reads, a schedule (it carries an id, which the
// client chooses when the caller gave none: the same id and body replay the first), a batch of
// them, a gate set, a schedule's pause and resume (each sets a state), an update of it that names
// no revision (it sets the fields it gives) and its delete (a retry that finds it gone is done). Not safe: a cancel, whose second try answers 409 once the first
// took; a redrive, whose second try would run the task again; adding upstreams; the bulk cancel
// and redrive. Those are sent once; their caller sees the error.

// MaxAttempts bounds how many times a request safe to retry is sent.
const MaxAttempts = 4

const (
	firstBackoff = 200 * time.Millisecond
	maxBackoff   = 5 * time.Second // also caps a Retry-After: past it the caller decides
)

// IdleConnTimeout is how long the client keeps a connection idle. It is below atf dev's
// IdleTimeout (30 s), so that the client drops a connection before the server closes it: a
// request sent on a connection as the server closes it fails, and net/http does not send a POST
// again by itself.
const IdleConnTimeout = 20 * time.Second

// NewTransport returns the transport of a client that has no HTTP client of its own: net/http's
// default transport with IdleConnTimeout. A caller with its own http.Client builds on it.
func NewTransport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.IdleConnTimeout = IdleConnTimeout
	return tr
}

var defaultHTTP = &http.Client{Transport: NewTransport()}

// retryable reports whether a try that got status (0: no answer) and err is worth another.
func retryable(status int, err error) bool {
	if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
		return true
	}
	if errors.As(err, new(notSigned)) {
		return false
	}
	return status == 0 && err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// jitter spreads the retries of clients that failed together.
var jitter = rand.Float64

// backoff returns the wait before try n+1 (n ≥ 1): doubling from firstBackoff with jitter, or
// the server's Retry-After if longer, at most maxBackoff.
func backoff(n int, retryAfter string) time.Duration {
	d := task.Backoff(n, firstBackoff, maxBackoff, jitter())
	if s, err := strconv.Atoi(retryAfter); err == nil && s > 0 {
		d = max(d, time.Duration(s)*time.Second)
	}
	return min(d, maxBackoff)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
