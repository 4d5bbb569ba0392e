package statusfn

import "time"

// NewClientBatches returns a Client whose batches go when they hold maxRequests calls, or linger
// after their first: with a linger longer than the test, a batch goes only when full, so a test
// knows which calls share an invocation without depending on timing.
func NewClientBatches(inv Invoker, linger time.Duration, maxRequests int) *Client {
	c := NewClientLinger(inv, linger)
	c.maxRequests = maxRequests
	return c
}
