package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/openatf/atf/shared/task"
)

// Periodic schedules (see the README's "Periodic schedules").

func schedulePath(lambda, id string) string {
	return "/v1/lambdas/" + url.PathEscape(lambda) + "/schedules/" + url.PathEscape(id)
}

// CreateSchedule creates a schedule; created is false for a replay of the same request.
// A spec without an ID gets one here, so that it is safe to send again (see Schedule).
func (c *Client) CreateSchedule(ctx context.Context, lambda string, spec task.ScheduleSpec) (sc task.Schedule, created bool, err error) {
	if spec.ID == "" {
		spec.ID = task.NewID(time.Now())
	}
	code, err := c.do(ctx, retry, http.MethodPost, "/v1/lambdas/"+url.PathEscape(lambda)+"/schedules", spec, &sc)
	return sc, code == http.StatusCreated, err
}

// GetSchedule returns a schedule with its next five fire times (NextFires).
func (c *Client) GetSchedule(ctx context.Context, lambda, id string) (sc task.Schedule, err error) {
	_, err = c.do(ctx, retry, http.MethodGet, schedulePath(lambda, id), nil, &sc)
	return sc, err
}

// ListSchedules returns a page of a lambda's schedules in id order and the next page's cursor,
// empty after the last. A limit of 0 takes the server's default.
func (c *Client) ListSchedules(ctx context.Context, lambda, cursor string, limit int) ([]task.Schedule, string, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var page struct {
		Schedules  []task.Schedule `json:"schedules"`
		NextCursor string          `json:"next_cursor"`
	}
	_, err := c.do(ctx, retry, http.MethodGet, "/v1/lambdas/"+url.PathEscape(lambda)+"/schedules?"+q.Encode(), nil, &page)
	return page.Schedules, page.NextCursor, err
}

// UpdateSchedule changes a schedule's definition: the fields of u given replace the schedule's
// (see task.ScheduleUpdate). With u.Revision (the Revision of a schedule read before), it fails
// with 412 precondition_failed if another update changed the schedule since, and is sent once: a
// second try after a first that went in would find its own revision moved. Without, it is sent
// again like a pause, and a retry makes the same change again. With u.FireIDTag (the FireIDTag
// of the schedule read) too, it fails with 412 if that schedule was deleted and created again,
// whose revision restarts at 1.
func (c *Client) UpdateSchedule(ctx context.Context, lambda, id string, u task.ScheduleUpdate) (sc task.Schedule, err error) {
	safe := retry
	if u.Revision != 0 {
		safe = once
	}
	_, err = c.do(ctx, safe, http.MethodPatch, schedulePath(lambda, id), u, &sc)
	return sc, err
}

// PauseSchedule stops a schedule's firings.
func (c *Client) PauseSchedule(ctx context.Context, lambda, id string) (sc task.Schedule, err error) {
	_, err = c.do(ctx, retry, http.MethodPost, schedulePath(lambda, id)+"/pause", nil, &sc)
	return sc, err
}

// ResumeSchedule makes a paused schedule fire again, from its next fire time on.
func (c *Client) ResumeSchedule(ctx context.Context, lambda, id string) (sc task.Schedule, err error) {
	_, err = c.do(ctx, retry, http.MethodPost, schedulePath(lambda, id)+"/resume", nil, &sc)
	return sc, err
}

// DeleteSchedule removes a schedule; the tasks it made stay.
func (c *Client) DeleteSchedule(ctx context.Context, lambda, id string) error {
	status, tries, err := c.send(ctx, retry, http.MethodDelete, schedulePath(lambda, id), nil, nil)
	if status == http.StatusNotFound && tries > 1 {
		return nil // an earlier try deleted it
	}
	return err
}
