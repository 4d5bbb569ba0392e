package httpapi

import (
	"net/http"

	"github.com/openatf/atf/shared/service/frontend"
	"github.com/openatf/atf/shared/task"
)

// cancelMatching cancels a page of the tasks a filter selects (frontend.CancelMatching).
func (a *api) cancelMatching(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Collection string      `json:"collection"`
		Status     task.Status `json:"status"`
		Limit      int         `json:"limit"`
		Cursor     string      `json:"cursor"`
	}
	if !a.decode(w, r, envelopeLimit, &req) {
		return
	}
	page, err := a.svc.CancelMatching(r.Context(), frontend.CancelFilter{
		Lambda: r.PathValue("lambda"), Collection: req.Collection, Status: req.Status, Limit: req.Limit, Cursor: req.Cursor,
	})
	if err != nil {
		a.fail(w, err)
		return
	}
	a.writeJSON(w, http.StatusOK, page)
}
