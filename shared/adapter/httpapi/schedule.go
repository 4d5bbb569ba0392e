package httpapi

import (
	"net/http"
	"strconv"

	"github.com/openatf/atf/shared/task"
)

// Periodic schedules:
//
//	POST   /v1/lambdas/{lambda}/schedules              create: 201 new, 200 replay, 409 id reused
//	GET    /v1/lambdas/{lambda}/schedules              list: ?limit=&cursor=
//	GET    /v1/lambdas/{lambda}/schedules/{id}         a schedule and its next five fire times
//	PATCH  /v1/lambdas/{lambda}/schedules/{id}         change its definition: 412 if the revision given is stale
//	POST   /v1/lambdas/{lambda}/schedules/{id}/pause   stop its firings
//	POST   /v1/lambdas/{lambda}/schedules/{id}/resume  fire again, from the next fire time on
//	DELETE /v1/lambdas/{lambda}/schedules/{id}         204; the tasks it made stay

func (a *api) routeSchedules() {
	a.mux.HandleFunc("POST /v1/lambdas/{lambda}/schedules", a.createSchedule)
	a.mux.HandleFunc("GET /v1/lambdas/{lambda}/schedules", a.listSchedules)
	a.mux.HandleFunc("GET /v1/lambdas/{lambda}/schedules/{id}", a.getSchedule)
	a.mux.HandleFunc("PATCH /v1/lambdas/{lambda}/schedules/{id}", a.updateSchedule)
	a.mux.HandleFunc("POST /v1/lambdas/{lambda}/schedules/{id}/pause", a.pauseSchedule)
	a.mux.HandleFunc("POST /v1/lambdas/{lambda}/schedules/{id}/resume", a.resumeSchedule)
	a.mux.HandleFunc("DELETE /v1/lambdas/{lambda}/schedules/{id}", a.deleteSchedule)
}

func (a *api) createSchedule(w http.ResponseWriter, r *http.Request) {
	var spec task.ScheduleSpec
	if !a.decode(w, r, task.MaxSchedulePayload+envelopeLimit, &spec) {
		return
	}
	sc, created, err := a.svc.CreateSchedule(r.Context(), r.PathValue("lambda"), spec)
	if err != nil {
		a.fail(w, err)
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	a.writeJSON(w, code, sc)
}

func (a *api) listSchedules(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 0
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			a.fail(w, task.Errorf(task.ErrInvalid, "limit %q is not a number in 1..%d", task.Echo(s), task.MaxListLimit))
			return
		}
		limit = n
	}
	list, next, err := a.svc.ListSchedules(r.Context(), r.PathValue("lambda"), q.Get("cursor"), limit)
	if err != nil {
		a.fail(w, err)
		return
	}
	if list == nil {
		list = []task.Schedule{}
	}
	a.writeJSON(w, http.StatusOK, map[string]any{"schedules": list, "next_cursor": next})
}

func (a *api) getSchedule(w http.ResponseWriter, r *http.Request) {
	sc, err := a.svc.GetSchedule(r.Context(), r.PathValue("lambda"), r.PathValue("id"))
	a.answerSchedule(w, sc, err)
}

func (a *api) updateSchedule(w http.ResponseWriter, r *http.Request) {
	var u task.ScheduleUpdate
	if !a.decode(w, r, task.MaxSchedulePayload+envelopeLimit, &u) {
		return
	}
	sc, err := a.svc.UpdateSchedule(r.Context(), r.PathValue("lambda"), r.PathValue("id"), u)
	a.answerSchedule(w, sc, err)
}

func (a *api) pauseSchedule(w http.ResponseWriter, r *http.Request) {
	sc, err := a.svc.PauseSchedule(r.Context(), r.PathValue("lambda"), r.PathValue("id"))
	a.answerSchedule(w, sc, err)
}

func (a *api) resumeSchedule(w http.ResponseWriter, r *http.Request) {
	sc, err := a.svc.ResumeSchedule(r.Context(), r.PathValue("lambda"), r.PathValue("id"))
	a.answerSchedule(w, sc, err)
}

func (a *api) answerSchedule(w http.ResponseWriter, sc task.Schedule, err error) {
	if err != nil {
		a.fail(w, err)
		return
	}
	a.writeJSON(w, http.StatusOK, sc)
}

func (a *api) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	if err := a.svc.DeleteSchedule(r.Context(), r.PathValue("lambda"), r.PathValue("id")); err != nil {
		a.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
