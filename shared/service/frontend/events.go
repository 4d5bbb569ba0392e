package frontend

import (
	"context"
	"errors"
	"time"

	"github.com/openatf/atf/shared/service/lifecycle"
)

// ErrNoFeed is Events' answer where no live feed is kept: on AWS, where the events are on
// EventBridge.
var ErrNoFeed = errors.New("live events are served by atf dev only: on AWS, subscribe to atf's lifecycle events on EventBridge (a rule on {\"source\": [\"atf\"]})")

// Events returns the lambda's lifecycle events after cursor, from this process's live feed
// (lifecycle.Feed.Read): at most limit, waiting up to wait (cut to MaxWait) for the first.
func (s *Service) Events(ctx context.Context, lambda, cursor string, limit int, wait time.Duration) (lifecycle.FeedPage, error) {
	if _, err := s.lambda(ctx, lambda); err != nil {
		return lifecycle.FeedPage{}, err
	}
	if s.feed == nil {
		return lifecycle.FeedPage{}, ErrNoFeed
	}
	return s.feed.Read(ctx, lambda, cursor, limit, min(wait, s.maxWait))
}
