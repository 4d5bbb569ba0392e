package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/service/lifecycle"
	"github.com/openatf/atf/shared/task"
)

// The live feed of lifecycle events (atf dev only; `atf tail` reads it):
//
//	GET /v1/lambdas/{lambda}/events   ?cursor=&limit=&wait=25s: the lambda's events after the
//	                                  cursor, oldest first: {"events":[...],"next_cursor":"...",
//	                                  "missed":n}. No cursor: from the oldest event kept;
//	                                  cursor=now: from the next. With wait, it answers once there
//	                                  is an event or after the wait (at most 25 s). 501 on AWS.

func (a *api) routeEvents() {
	a.mux.HandleFunc("GET /v1/lambdas/{lambda}/events", a.events)
}

func (a *api) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 0
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > lifecycle.MaxFeedPage {
			a.fail(w, task.Errorf(task.ErrInvalid, "limit %q is not a number in 1..%d", task.Echo(s), lifecycle.MaxFeedPage))
			return
		}
		limit = n
	}
	var wait time.Duration
	if s := q.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, "malformed", fmt.Sprintf("wait %q is not a duration such as \"25s\"", task.Echo(s)))
			return
		}
		wait = d
	}
	page, err := a.svc.Events(r.Context(), r.PathValue("lambda"), q.Get("cursor"), limit, wait)
	if errors.Is(err, frontend.ErrNoFeed) {
		writeError(w, http.StatusNotImplemented, "not_available", err.Error())
		return
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	if page.Events == nil {
		page.Events = []lifecycle.Event{} // an empty page is [], as the contract says
	}
	a.writeJSON(w, http.StatusOK, page)
}
