package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/openatf/atf/shared/service/lifecycle"
)

// Events returns a page of a lambda's lifecycle events after cursor from atf dev's live feed,
// waiting up to wait for the first: "" reads from the oldest event the feed keeps,
// lifecycle.FromNow from the next. Go on with the page's NextCursor. On AWS the API answers 501
// (a *Error): the events are on EventBridge.
func (c *Client) Events(ctx context.Context, lambda, cursor string, limit int, wait time.Duration) (page lifecycle.FeedPage, err error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	_, err = c.do(ctx, retry, http.MethodGet, "/v1/lambdas/"+url.PathEscape(lambda)+"/events?"+q.Encode(), nil, &page)
	return page, err
}
