package task

import "time"

// Backoff is the delay before retry number attempt (1 for the first retry): base × 2^(attempt-1),
// capped at max, with "equal jitter": half the delay is fixed, and jitter (in [0,1)) scales the
// other half, so retries of tasks that failed together spread out but never retry at once.
func Backoff(attempt int, base, max time.Duration, jitter float64) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d/2 + time.Duration(jitter*float64(d/2))
}
