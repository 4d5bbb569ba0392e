package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
)

// atf schedules: periodic schedules (see the README's "Periodic schedules").
func init() {
	clientCommands["schedules"] = clientCommand{1, true, "LAMBDA [create | get|update|pause|resume|delete ID]",
		[]string{"id", "cron", "tz", "rate", "payload", "priority", "collection", "max-attempts", "catch-up", "overlap", "revision", "limit", "cursor"},
		runSchedules}
}

const schedulesUsage = `  atf schedules LAMBDA [--limit N] [--cursor C]
      list the lambda's schedules, each with its next fire time
  atf schedules LAMBDA create (--cron "30 2 * * *" [--tz Europe/Berlin] | --rate 5m) [--id ID]
          [--payload JSON] [--priority P] [--collection C] [--max-attempts N]
          [--catch-up skip|all] [--overlap allow|skip]
  atf schedules LAMBDA update ID [--cron C [--tz Z] | --tz Z | --rate R] [--payload JSON]
          [--priority P] [--collection C] [--max-attempts N] [--catch-up C] [--overlap O]
          [--revision N]
      change what the flags give, the rest stays; new fire times count from now. With --revision,
      refused if the schedule's revision moved (another update); the CLI reads it first when a
      template flag is given, and sends its revision with the merged template
  atf schedules LAMBDA get|pause|resume|delete ID
      a schedule with its next five fire times, in its zone; stop or restart its firings; remove it
`

func runSchedules(ctx context.Context, c *client.Client, pos []string, o flagValues) (any, error) {
	lambda := pos[0]
	if len(pos) == 1 {
		limit, err := o.intFlag("limit", 0)
		if err != nil {
			return nil, err
		}
		list, next, err := c.ListSchedules(ctx, lambda, o.get("cursor"), limit)
		return schedulePage{Schedules: list, NextCursor: next}, err
	}
	verb := pos[1]
	if verb == "create" {
		if len(pos) != 2 {
			return nil, fmt.Errorf("schedules LAMBDA create takes no more arguments; give the id as --id")
		}
		spec := task.ScheduleSpec{
			ID: o.get("id"), Cron: o.get("cron"), TimeZone: o.get("tz"), Rate: o.get("rate"),
			CatchUp: o.get("catch-up"), Overlap: o.get("overlap"),
			Task: task.Template{Priority: o.get("priority"), Collection: o.get("collection")},
		}
		var err error
		if spec.Task.Payload, err = o.payload(); err != nil {
			return nil, err
		}
		if spec.Task.MaxAttempts, err = o.intFlag("max-attempts", 0); err != nil {
			return nil, err
		}
		sc, _, err := c.CreateSchedule(ctx, lambda, spec)
		return scheduleView(sc), err
	}
	if verb == "update" {
		if len(pos) != 3 {
			return nil, fmt.Errorf("schedules LAMBDA update needs the schedule's ID")
		}
		u, err := scheduleUpdate(ctx, c, lambda, pos[2], o)
		if err != nil {
			return nil, err
		}
		sc, err := c.UpdateSchedule(ctx, lambda, pos[2], u)
		return scheduleView(sc), err
	}
	if len(pos) != 3 {
		return nil, fmt.Errorf("schedules LAMBDA %s needs the schedule's ID", verb)
	}
	id := pos[2]
	var sc task.Schedule
	var err error
	switch verb {
	case "get":
		sc, err = c.GetSchedule(ctx, lambda, id)
	case "pause":
		sc, err = c.PauseSchedule(ctx, lambda, id)
	case "resume":
		sc, err = c.ResumeSchedule(ctx, lambda, id)
	case "delete":
		if err := c.DeleteSchedule(ctx, lambda, id); err != nil {
			return nil, err
		}
		return deleted{Deleted: lambda + "/" + id}, nil
	default:
		return nil, fmt.Errorf("unknown schedules command %q: create, get, update, pause, resume or delete", verb)
	}
	return scheduleView(sc), err
}

// scheduleUpdate is the update the flags give. The API replaces a task template whole, so a
// template flag changes the schedule's template as read, conditional on the revision and the
// fire_id_tag read: an update made in between, or a schedule created again, is refused rather
// than overwritten.
func scheduleUpdate(ctx context.Context, c *client.Client, lambda, id string, o flagValues) (task.ScheduleUpdate, error) {
	u := task.ScheduleUpdate{Cron: o.get("cron"), TimeZone: o.get("tz"), Rate: o.get("rate"), CatchUp: o.get("catch-up"), Overlap: o.get("overlap")}
	revision, err := o.intFlag("revision", 0)
	if err != nil {
		return u, err
	}
	u.Revision = int64(revision)
	if o.get("payload") == "" && o.get("priority") == "" && o.get("collection") == "" && o.get("max-attempts") == "" {
		return u, nil
	}
	sc, err := c.GetSchedule(ctx, lambda, id)
	if err != nil {
		return u, err
	}
	if u.Revision == 0 {
		u.Revision = sc.Revision
	}
	u.FireIDTag = sc.FireIDTag // a schedule deleted and created again restarts its revisions
	tmpl := sc.Task
	if p, err := o.payload(); err != nil {
		return u, err
	} else if p != nil {
		tmpl.Payload = p
	}
	if p := o.get("priority"); p != "" {
		tmpl.Priority = p
	}
	if col := o.get("collection"); col != "" {
		tmpl.Collection = col
	}
	if tmpl.MaxAttempts, err = o.intFlag("max-attempts", tmpl.MaxAttempts); err != nil {
		return u, err
	}
	u.Task = &tmpl
	return u, nil
}

type scheduleView task.Schedule

func (v scheduleView) MarshalJSON() ([]byte, error) { return json.Marshal(task.Schedule(v)) }

type schedulePage struct {
	Schedules  []task.Schedule `json:"schedules"`
	NextCursor string          `json:"next_cursor"`
}

type deleted struct {
	Deleted string `json:"deleted"`
}

// kind is how a schedule fires: its cron and time zone, or its rate.
func kind(sc task.Schedule) string {
	if sc.Rate != "" {
		return "rate(" + sc.Rate + ")"
	}
	return sc.Cron + " (" + sc.TimeZone + ")"
}

// fireTime is a fire time in the schedule's zone, with the zone: "2026-11-26 02:30:00 CET".
func fireTime(sc task.Schedule, t time.Time) string {
	return t.In(sc.Location()).Format(time.DateTime + " MST")
}

func printSchedules(w *tabwriter.Writer, v any) bool {
	line := func(cols ...string) { fmt.Fprintln(w, strings.Join(cols, "\t")) }
	switch v := v.(type) {
	case scheduleView:
		for _, kv := range [][2]string{
			{"id", v.ID}, {"lambda", v.Lambda}, {"fires", kind(task.Schedule(v))}, {"state", v.State}, {"revision", fmt.Sprint(v.Revision)},
			{"catch_up", v.CatchUp}, {"overlap", v.Overlap}, {"priority", v.Task.Priority}, {"collection", v.Task.Collection},
			{"payload", compactJSON(v.Task.Payload)},
		} {
			line(kv[0]+":", kv[1])
		}
		for i, f := range v.NextFires {
			label := ""
			if i == 0 {
				label = "next fires:"
			}
			line(label, fireTime(task.Schedule(v), f))
		}
	case schedulePage:
		line("ID", "FIRES", "STATE", "NEXT FIRE")
		for _, sc := range v.Schedules {
			next := "-"
			if len(sc.NextFires) > 0 {
				next = fireTime(sc, sc.NextFires[0])
			}
			line(sc.ID, kind(sc), sc.State, next)
		}
		if v.NextCursor != "" {
			w.Flush()
			fmt.Fprintf(w, "more: --cursor %s\n", v.NextCursor)
		}
	case deleted:
		line("deleted:", v.Deleted)
	default:
		return false
	}
	return true
}
