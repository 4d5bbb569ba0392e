package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/openatf/atf/shared/task"
)

// CancelFilter selects the tasks of one lambda that CancelMatching cancels: a collection, a
// status (a waiting or running one), or both.
type CancelFilter struct {
	Collection string      `json:"collection,omitempty"`
	Status     task.Status `json:"status,omitempty"`
	Limit      int         `json:"limit,omitempty"` // tasks per page: at most 100, the default
	Cursor     string      `json:"cursor,omitempty"`
}

// CancelPage is what one page of a bulk cancel did.
type CancelPage struct {
	Cancelled       int    `json:"cancelled"`        // waiting tasks that ended cancelled
	CancelRequested int    `json:"cancel_requested"` // running tasks marked: each ends cancelled once stopped
	Skipped         int    `json:"skipped"`          // ended already, or their cancel requested before
	NextCursor      string `json:"next_cursor"`      // empty after the last page
}

// CancelMatching cancels one page of the tasks f selects and returns what it did, with the
// cursor of the next page: one request's cost is bounded by the page. CancelAll goes on to the end.
func (c *Client) CancelMatching(ctx context.Context, lambda string, f CancelFilter) (p CancelPage, err error) {
	_, err = c.do(ctx, once, http.MethodPost, "/v1/lambdas/"+url.PathEscape(lambda)+"/tasks/cancel", f, &p)
	return p, err
}

// CancelAll cancels every task f selects, a page per request, and returns the sums. A page that
// fails ends it with what was done so far and the cursor to go on from (f.Cursor of the result's
// NextCursor): sending it again is safe, as tasks cancelled already are skipped.
func (c *Client) CancelAll(ctx context.Context, lambda string, f CancelFilter) (CancelPage, error) {
	var sum CancelPage
	for {
		p, err := c.CancelMatching(ctx, lambda, f)
		if err != nil {
			sum.NextCursor = f.Cursor
			return sum, err
		}
		sum.Cancelled += p.Cancelled
		sum.CancelRequested += p.CancelRequested
		sum.Skipped += p.Skipped
		if f.Cursor = p.NextCursor; f.Cursor == "" {
			sum.NextCursor = ""
			return sum, nil
		}
	}
}
