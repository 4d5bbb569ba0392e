package task_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

var schedLambda = task.Lambda{Name: "report"}.WithDefaults()

func newSchedule(t *testing.T, spec task.ScheduleSpec, now time.Time) task.Schedule {
	t.Helper()
	s, err := task.NewSchedule(spec, schedLambda, now, task.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func fires(t *testing.T, s task.Schedule, from time.Time, n int) []string {
	t.Helper()
	var out []string
	for at := from; len(out) < n; {
		next, err := s.Next(at)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, next.Format(time.RFC3339))
		at = next
	}
	return out
}

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	}
}

// TestCronBerlinDST: a cron in Europe/Berlin across both changes of 2026 (clocks forward on
// 29 March at 02:00 CET, back on 25 October at 03:00 CEST).
func TestCronBerlinDST(t *testing.T) {
	created := utc("2026-03-27T12:00:00Z")
	daily := newSchedule(t, task.ScheduleSpec{Cron: "30 2 * * *", TimeZone: "Europe/Berlin"}, created)
	// 02:30 on 29 March does not exist: it is read with the offset from before the change, CET,
	// so it fires an hour (the gap) later than it says, at 03:30 CEST (01:30 UTC), once.
	equal(t, "daily in spring", fires(t, daily, created, 4), []string{
		"2026-03-28T01:30:00Z", // 02:30 CET
		"2026-03-29T01:30:00Z", // skipped wall clock: 02:30 CET, which reads 03:30 CEST
		"2026-03-30T00:30:00Z", // 02:30 CEST
		"2026-03-31T00:30:00Z",
	})
	// 02:30 on 25 October comes twice: it fires at the first, 02:30 CEST (00:30 UTC), once.
	equal(t, "daily in autumn", fires(t, daily, utc("2026-10-23T12:00:00Z"), 4), []string{
		"2026-10-24T00:30:00Z", // 02:30 CEST
		"2026-10-25T00:30:00Z", // the first 02:30
		"2026-10-26T01:30:00Z", // 02:30 CET
		"2026-10-27T01:30:00Z",
	})
	// An hourly cron counts real hours: no hour in spring (there is no 02:00), both in autumn.
	hourly := newSchedule(t, task.ScheduleSpec{Cron: "0 * * * *", TimeZone: "Europe/Berlin"}, created)
	equal(t, "hourly in spring", fires(t, hourly, utc("2026-03-28T23:30:00Z"), 3), []string{
		"2026-03-29T00:00:00Z", // 01:00 CET
		"2026-03-29T01:00:00Z", // 03:00 CEST
		"2026-03-29T02:00:00Z", // 04:00 CEST
	})
	equal(t, "hourly in autumn", fires(t, hourly, utc("2026-10-24T23:30:00Z"), 3), []string{
		"2026-10-25T00:00:00Z", // 02:00 CEST
		"2026-10-25T01:00:00Z", // 02:00 CET
		"2026-10-25T02:00:00Z", // 03:00 CET
	})
	// Every 30 minutes between 02:00 and 02:59: the repeated hour fires once, its first time.
	half := newSchedule(t, task.ScheduleSpec{Cron: "*/30 2 * * *", TimeZone: "Europe/Berlin"}, created)
	equal(t, "02:xx in autumn", fires(t, half, utc("2026-10-24T12:00:00Z"), 3), []string{
		"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:00:00Z",
	})
	// Both 02:00 and 02:30 are skipped in spring: each fires shifted by the gap, 03:00 and
	// 03:30 CEST, two firings.
	equal(t, "02:xx in spring", fires(t, half, utc("2026-03-28T12:00:00Z"), 3), []string{
		"2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z", "2026-03-30T00:00:00Z",
	})
}

// TestCronSkippedWallClocks: wall-clock times that a change skips, each fired once, shifted by the
// gap, on the day they name.
func TestCronSkippedWallClocks(t *testing.T) {
	for _, tc := range []struct {
		name, cron, zone, from string
		want                   []string
	}{
		// Clocks go forward at midnight (00:00 -04 reads 01:00 -03): the day's midnight fires
		// at 01:00 -03 that day (read before the change, it fell months back and the day had none).
		{"Santiago", "0 0 * * *", "America/Santiago", "2026-09-05T12:00:00Z", []string{
			"2026-09-06T04:00:00Z", // 00:00 -04, which reads 01:00 -03
			"2026-09-07T03:00:00Z", // 00:00 -03
		}},
		{"Havana", "0 0 * * *", "America/Havana", "2026-03-07T12:00:00Z", []string{
			"2026-03-08T05:00:00Z", // 00:00 CST, which reads 01:00 CDT
			"2026-03-09T04:00:00Z", // 00:00 CDT
		}},
		// Two skipped times of one hour are two firings, each shifted by the gap.
		{"Berlin 0,30", "0,30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", []string{
			"2026-03-29T01:00:00Z", // 02:00 CET, which reads 03:00 CEST
			"2026-03-29T01:30:00Z", // 02:30 CET, which reads 03:30 CEST
			"2026-03-30T00:00:00Z", // 02:00 CEST
		}},
		// 02:00 and 03:00 name one instant (03:00 CEST) that fires once; so do 02:30 and 03:30.
		{"Berlin 2,3", "0,30 2,3 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", []string{
			"2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z", "2026-03-30T00:00:00Z",
		}},
		// A 30-minute gap (02:00 +10:30 reads 02:30 +11): 02:20 is shifted to 02:50 +11, after
		// 02:40, which the day has: the earlier instant fires first.
		{"Lord Howe", "20,40 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00:00Z", []string{
			"2026-10-03T15:40:00Z", // 02:40 +11
			"2026-10-03T15:50:00Z", // 02:20 +10:30, which reads 02:50 +11
			"2026-10-04T15:20:00Z", // 02:20 +11
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSchedule(t, task.ScheduleSpec{Cron: tc.cron, TimeZone: tc.zone}, utc(tc.from))
			equal(t, tc.name, fires(t, s, utc(tc.from), len(tc.want)), tc.want)
			// From each firing on, the next is the one after it: shifted times still to come
			// within the gap's length after the change are not passed over.
			for i := range len(tc.want) - 1 {
				equal(t, tc.name+" from "+tc.want[i], fires(t, s, utc(tc.want[i]), 1), tc.want[i+1:i+2])
			}
		})
	}
}

func TestRateSchedule(t *testing.T) {
	now := utc("2026-11-25T10:00:00.400Z")
	s := newSchedule(t, task.ScheduleSpec{Rate: "rate(2s)"}, now)
	if s.Rate != "2s" || !s.NextFire.Equal(utc("2026-11-25T10:00:02Z")) {
		t.Fatalf("rate %q next %s", s.Rate, s.NextFire)
	}
	got := s.Upcoming(task.NextFiresShown)
	if len(got) != 5 || !got[4].Equal(utc("2026-11-25T10:00:10Z")) {
		t.Fatalf("upcoming %v", got)
	}
	if id := s.FireID(got[0]); id != s.ID+":20261125T100002Z."+s.Incarnation[:10] {
		t.Fatalf("fire id %s", id)
	}
	if id := task.FireID(s.ID, "", got[0]); id != s.ID+":20261125T100002Z" {
		t.Fatalf("fire id without an incarnation %s", id)
	}
}

// TestFireIDIncarnations: a schedule created again under its id makes other firing ids, each at
// most a task id's 128 characters under the longest schedule id, sorting by time.
func TestFireIDIncarnations(t *testing.T) {
	now := utc("2026-11-25T10:00:00Z")
	spec := task.ScheduleSpec{ID: strings.Repeat("s", 100), Rate: "1s"}
	a, b := newSchedule(t, spec, now), newSchedule(t, spec, now)
	at := utc("2026-11-25T10:00:01Z")
	if a.FireID(at) == b.FireID(at) {
		t.Fatalf("two incarnations share the firing id %s", a.FireID(at))
	}
	if id := a.FireID(at); len(id) > 128 || task.ValidateID("task id", id) != nil {
		t.Fatalf("firing id %s (%d characters) is not a valid task id", id, len(id))
	}
	if a.FireID(at) >= a.FireID(at.Add(time.Second)) {
		t.Fatal("the firing ids of one incarnation do not sort by time")
	}
}

func TestScheduleValidation(t *testing.T) {
	for _, spec := range []task.ScheduleSpec{
		{},
		{Cron: "* * * * *", Rate: "1s"},
		{Cron: "* * * *"},
		{Cron: "@daily"},
		{Cron: "CRON_TZ=Europe/Berlin * * * * *"},
		{Cron: "* * * * *", TimeZone: "Mars/Olympus"},
		{Rate: "0s"},
		{Rate: "1d"},
		{Rate: "8785h"}, // just past MaxRate
		// Counts whose product with the unit passes int64's nanoseconds, back in range if it
		// wrapped: 5124096h is 584 years, not about 25 minutes.
		{Rate: "5124096h"},
		{Rate: "999999999h"},
		{Rate: "999999999m"},
		{Rate: "1s", TimeZone: "UTC"},
		{Rate: "1s", CatchUp: "some"},
		{Rate: "1s", Overlap: "queue"},
		{Rate: "1s", Task: task.Template{Priority: "urgent"}},
		{Rate: "1s", Task: task.Template{Payload: []byte(`{`)}},
		{Rate: "1s", ID: "bad id"},
	} {
		if _, err := task.NewSchedule(spec, schedLambda, time.Now(), task.Config{}.WithDefaults()); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("%+v: got %v, want ErrInvalid", spec, err)
		}
	}
}

// TestFiringsCatchUp: after a stop of 10 s a rate(2s) schedule has five firings missed; skip runs
// the latest, all runs each, and both keep the firings ahead of now.
func TestFiringsCatchUp(t *testing.T) {
	created := utc("2026-11-25T10:00:00Z")
	for _, tc := range []struct {
		catchUp string
		want    []string
	}{
		{task.CatchUpSkip, []string{"10:00:10", "10:00:12"}},
		{task.CatchUpAll, []string{"10:00:02", "10:00:04", "10:00:06", "10:00:08", "10:00:10", "10:00:12"}},
	} {
		s := newSchedule(t, task.ScheduleSpec{Rate: "2s", CatchUp: tc.catchUp}, created)
		now := utc("2026-11-25T10:00:11Z")
		got, next, err := s.Firings(now, now.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var clock []string
		for _, f := range got {
			clock = append(clock, f.Format("15:04:05"))
		}
		equal(t, tc.catchUp, clock, tc.want)
		if !next.Equal(utc("2026-11-25T10:00:14Z")) {
			t.Fatalf("%s: next %s", tc.catchUp, next)
		}
	}
	// A year of minutes missed: all runs the latest MaxCatchUp, read in bounded steps.
	s := newSchedule(t, task.ScheduleSpec{Cron: "* * * * *", CatchUp: task.CatchUpAll}, created)
	now := created.Add(365 * 24 * time.Hour)
	got, _, err := s.Firings(now, now)
	if err != nil || len(got) != task.MaxCatchUp || !got[len(got)-1].Equal(now) {
		t.Fatalf("a year: %d firings, last %v, %v", len(got), got[len(got)-1], err)
	}
	// Nothing due: nothing fires.
	if got, next, _ := s.Firings(created, created); len(got) != 0 || !next.Equal(s.NextFire) {
		t.Fatalf("not due: %v %s", got, next)
	}
}

func TestPauseResume(t *testing.T) {
	created := utc("2026-11-25T10:00:00Z")
	s := newSchedule(t, task.ScheduleSpec{Rate: "1m"}, created)
	p := task.PauseSchedule(s, created.Add(time.Second))
	if p.State != task.SchedulePaused || p.Version != s.Version+1 {
		t.Fatalf("paused %+v", p)
	}
	r, err := task.ResumeSchedule(p, created.Add(5*time.Minute+time.Second))
	if err != nil || r.State != task.ScheduleActive || !r.NextFire.Equal(created.Add(6*time.Minute)) {
		t.Fatalf("resumed %+v %v", r, err)
	}
}

// TestUpcomingInZone: a paused schedule lists no next fires; an active one lists them in its zone,
// a cron schedule's time zone or UTC for a rate.
func TestUpcomingInZone(t *testing.T) {
	now := utc("2026-11-25T10:00:00Z")
	berlin := newSchedule(t, task.ScheduleSpec{Cron: "30 2 * * *", TimeZone: "Europe/Berlin"}, now)
	got := berlin.Upcoming(2)
	if len(got) != 2 || got[0].Format(time.RFC3339) != "2026-11-26T02:30:00+01:00" || got[0].Location().String() != "Europe/Berlin" {
		t.Fatalf("cron upcoming %v", got)
	}
	rate := newSchedule(t, task.ScheduleSpec{Rate: "1m"}, now)
	if got := rate.Upcoming(1); len(got) != 1 || got[0].Location() != time.UTC {
		t.Fatalf("rate upcoming %v", got)
	}
	if got := task.PauseSchedule(berlin, now).Upcoming(task.NextFiresShown); len(got) != 0 {
		t.Fatalf("a paused schedule lists next fires %v", got)
	}
}

// TestUpdateSchedule: an update replaces the fields it gives; new fire times count from the update,
// after the firings already made; a template change keeps the next firing; a stale revision
// fails.
func TestUpdateSchedule(t *testing.T) {
	created := utc("2026-11-25T10:00:00Z")
	cfg := task.Config{}.WithDefaults()
	s := newSchedule(t, task.ScheduleSpec{Rate: "1h", Task: task.Template{Priority: "high"}, Overlap: task.OverlapSkip}, created)
	now := created.Add(10*time.Minute + 30*time.Second)

	// A new rate: every minute from now, the rest kept.
	u, err := task.UpdateSchedule(s, task.ScheduleUpdate{Rate: "1m", Revision: 1}, schedLambda, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if u.Rate != "1m" || u.Task.Priority != "high" || u.Overlap != task.OverlapSkip || u.Incarnation != s.Incarnation || !u.CreatedAt.Equal(created) {
		t.Fatalf("updated %+v", u)
	}
	if u.Version != s.Version+1 || u.Revision != 2 {
		t.Fatalf("version %d revision %d, want %d and 2", u.Version, u.Revision, s.Version+1)
	}
	equal(t, "new rate", fires(t, u, now, 3), []string{"2026-11-25T10:11:30Z", "2026-11-25T10:12:30Z", "2026-11-25T10:13:30Z"})
	if !u.NextFire.Equal(utc("2026-11-25T10:11:30Z")) {
		t.Fatalf("next fire %s, want the new rate's first after the update", u.NextFire)
	}

	// From a rate to a cron in a zone; then the zone alone.
	c, err := task.UpdateSchedule(u, task.ScheduleUpdate{Cron: "0 3 * * *", TimeZone: "Europe/Berlin"}, schedLambda, now, cfg)
	if err != nil || c.Rate != "" || c.Cron != "0 3 * * *" || !c.NextFire.Equal(utc("2026-11-26T02:00:00Z")) || c.Revision != 3 {
		t.Fatalf("to cron: %+v %v", c, err)
	}
	z, err := task.UpdateSchedule(c, task.ScheduleUpdate{TimeZone: "UTC"}, schedLambda, now, cfg)
	if err != nil || z.Cron != "0 3 * * *" || !z.NextFire.Equal(utc("2026-11-26T03:00:00Z")) {
		t.Fatalf("zone: %+v %v", z, err)
	}

	// A firing made ahead of its time stands: the new fire times begin after it.
	ahead := utc("2026-11-25T11:00:00Z")
	fired := task.Fire(s, &ahead, ahead.Add(time.Hour), created.Add(59*time.Minute))
	u, err = task.UpdateSchedule(fired, task.ScheduleUpdate{Rate: "10s"}, schedLambda, created.Add(59*time.Minute+30*time.Second), cfg)
	if err != nil || !u.NextFire.Equal(ahead.Add(10*time.Second)) || u.LastFire == nil || !u.LastFire.Equal(ahead) {
		t.Fatalf("after a firing made ahead: next %s last %v, %v", u.NextFire, u.LastFire, err)
	}

	// Only the template: the fire times and the next firing stay.
	payload := task.Template{Payload: []byte(`{"a": 1}`)}
	p, err := task.UpdateSchedule(s, task.ScheduleUpdate{Task: &payload}, schedLambda, now, cfg)
	if err != nil || string(p.Task.Payload) != `{"a":1}` || p.Task.Priority != "" || !p.Anchor.Equal(s.Anchor) || !p.NextFire.Equal(s.NextFire) {
		t.Fatalf("template only: %+v %v", p, err)
	}

	// Refused: a stale revision, nothing to change, a time zone for a rate, a bad rate.
	if _, err := task.UpdateSchedule(p, task.ScheduleUpdate{Rate: "5m", Revision: 1}, schedLambda, now, cfg); !errors.Is(err, task.ErrPrecondition) {
		t.Fatalf("stale revision: %v, want ErrPrecondition", err)
	}
	for _, bad := range []task.ScheduleUpdate{{}, {TimeZone: "Europe/Berlin"}, {Rate: "2d"}, {Cron: "0 3 * * *", TimeZone: "Mars/Base"}} {
		if _, err := task.UpdateSchedule(s, bad, schedLambda, now, cfg); !errors.Is(err, task.ErrInvalid) {
			t.Errorf("update %+v: %v, want ErrInvalid", bad, err)
		}
	}
}
