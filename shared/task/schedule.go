package task

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Periodic schedules: a Schedule creates one task of its lambda at each of its fire times, from a
// template. Its kind is cron (five fields, read in a time zone) or rate (every N seconds, minutes
// or hours). The store keeps it with the time of its next firing (NextFire); the consumer's pass
// reads the schedules due (ScheduleStore.DueSchedules), and in one atomic write creates its
// firings' tasks and moves NextFire on (Fire), conditional on the schedule's version and
// incarnation (ScheduleStore.FireSchedule).
//
// One task per firing: a firing's task id is FireID(schedule, fire time), and creating a task is
// idempotent on its id, so a firing seen twice (two consumers, a retry) finds its task there and
// creates none. The write is conditional, so of two consumers that read the same version, one
// makes the firings; and a pause or a delete, which moves the version or removes the schedule,
// makes every pass that read the schedule before it create nothing.

// Schedule policies.
const (
	// CatchUpSkip (the default): of the firings missed while nothing fired (the consumer stopped,
	// or the schedule's pass was late), only the latest runs.
	CatchUpSkip = "skip"
	// CatchUpAll: every missed firing runs, the latest MaxCatchUp of them at most.
	CatchUpAll = "all"
	// OverlapAllow (the default): a firing creates its task whatever the previous one's state.
	OverlapAllow = "allow"
	// OverlapSkip: a firing creates no task while the previous firing's task has not ended.
	OverlapSkip = "skip"
)

// Schedule states.
const (
	ScheduleActive = "active"
	SchedulePaused = "paused"
)

// Schedule limits.
const (
	// MaxCatchUp bounds the missed firings that catch-up "all" runs at once: the latest ones.
	MaxCatchUp = 100
	// MaxFiringsPerWrite bounds the firings one FireSchedule makes: with the schedule, one
	// DynamoDB transaction (MaxBatch items). A pass with more makes these and leaves the schedule
	// due at the first of the others.
	MaxFiringsPerWrite = MaxBatch - 1
	// MaxSchedulePayload bounds a template's payload: every firing rewrites the schedule, and on
	// DynamoDB a write costs a unit per KB of the item (docs/capacity.md).
	MaxSchedulePayload = 16 << 10
	// MinRate and MaxRate bound a rate schedule's period.
	MinRate = time.Second
	MaxRate = 366 * 24 * time.Hour
	// maxScheduleIDLength leaves room in a task id (128 characters) for the fire time and the
	// incarnation's tag (FireID).
	maxScheduleIDLength = 100
	// NextFiresShown is how many fire times a schedule's answer lists.
	NextFiresShown = 5
)

// Template is what each firing's task is made of.
type Template struct {
	Payload     json.RawMessage `json:"payload,omitempty"`
	Priority    string          `json:"priority,omitempty"`
	Collection  string          `json:"collection,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
}

// ScheduleSpec is a request to create a schedule, as a client sends it.
type ScheduleSpec struct {
	ID       string   `json:"id,omitempty"`
	Cron     string   `json:"cron,omitempty"`
	TimeZone string   `json:"time_zone,omitempty"`
	Rate     string   `json:"rate,omitempty"`
	Task     Template `json:"task"`
	CatchUp  string   `json:"catch_up,omitempty"`
	Overlap  string   `json:"overlap,omitempty"`
}

// Schedule is a stored periodic schedule.
type Schedule struct {
	ID       string   `json:"id"`
	Lambda   string   `json:"lambda"`
	Cron     string   `json:"cron,omitempty"`
	TimeZone string   `json:"time_zone,omitempty"`
	Rate     string   `json:"rate,omitempty"`
	Task     Template `json:"task"`
	CatchUp  string   `json:"catch_up"`
	Overlap  string   `json:"overlap"`
	State    string   `json:"state"`
	// Anchor is where a rate schedule counts from: it fires at Anchor + k × rate.
	Anchor time.Time `json:"anchor,omitzero"`
	// NextFire is the earliest firing not yet made. A paused schedule keeps it, but no store
	// returns a paused schedule as due. The stores keep it; an answer shows NextFires instead.
	NextFire time.Time `json:"-"`
	// LastFire is the latest firing that created a task (zero before the first): overlap "skip"
	// reads its task, FireID(LastFire).
	LastFire  *time.Time `json:"last_fire,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	Version   int64      `json:"version"`
	// Revision counts the changes of the schedule's definition: 1 at create, one more at each
	// UpdateSchedule. Firings, pause and resume leave it, so that an update conditional on it
	// (ScheduleUpdate.Revision) fails only when someone else changed the definition. A schedule
	// stored before revisions reads 0, as its first.
	Revision int64 `json:"revision"`
	// Incarnation is a random token set at create and never changed: a schedule deleted and
	// created again under its id restarts at version 1, and this tells the two apart, so that a
	// pass that read the first cannot write the second.
	Incarnation string `json:"-"`
	// Spec fingerprints the create request, so that a replay is told from another request that
	// reuses the id.
	Spec string `json:"-"`
	// NextFires are the next fire times, set on an answer, never stored.
	NextFires []time.Time `json:"next_fires,omitempty"`
	// FireIDTag is the tag that ends its firings' task ids (FireID), set on an answer, never
	// stored: a client finds a firing's task from it and the fire time.
	FireIDTag string `json:"fire_id_tag,omitempty"`
}

// String names the schedule: lambda/id.
func (s Schedule) String() string { return s.Lambda + "/" + s.ID }

var ratePattern = regexp.MustCompile(`^(?:rate\()?([1-9][0-9]{0,8})\s*(s|m|h)\)?$`)

// cronParser reads the five standard fields; a time zone is a field of the schedule, not a
// CRON_TZ prefix, and descriptors (@daily) are left out so that every schedule reads alike.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// ParseRate reads a rate: a positive count of s, m or h, such as "30s", "5m", "1h" or "rate(2s)".
func ParseRate(s string) (time.Duration, error) {
	m := ratePattern.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, Errorf(ErrInvalid, "rate %q: give a count and a unit, s, m or h, such as 30s, 5m or 1h", Echo(s))
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	unit := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[m[2]]
	// The count is checked before the product: a count of hours past MaxRate can wrap int64's
	// nanoseconds back into range (5124096h is 584 years, or about 25 minutes once wrapped).
	if n > int64(MaxRate/unit) || time.Duration(n)*unit < MinRate {
		return 0, Errorf(ErrInvalid, "rate %q: must be within %s and %s", Echo(s), MinRate, MaxRate)
	}
	return time.Duration(n) * unit, nil
}

// NewSchedule validates spec for lambda l and returns the schedule it describes, active, its
// first firing the first fire time after now.
func NewSchedule(spec ScheduleSpec, l Lambda, now time.Time, c Config) (Schedule, error) {
	now = now.UTC()
	s := Schedule{
		ID: spec.ID, Lambda: l.Name, Cron: strings.TrimSpace(spec.Cron), TimeZone: spec.TimeZone, Rate: strings.TrimSpace(spec.Rate),
		Task: spec.Task, CatchUp: spec.CatchUp, Overlap: spec.Overlap, State: ScheduleActive,
		CreatedAt: now, UpdatedAt: now, Version: 1, Revision: 1, Incarnation: rand.Text(),
	}
	if s.ID == "" {
		s.ID = NewID(now)
	} else if err := ValidateID("schedule id", s.ID); err != nil {
		return Schedule{}, err
	} else if len(s.ID) > maxScheduleIDLength {
		return Schedule{}, Errorf(ErrInvalid, "schedule id: at most %d characters, got %d", maxScheduleIDLength, len(s.ID))
	}
	switch {
	case s.Cron != "" && s.Rate != "":
		return Schedule{}, Errorf(ErrInvalid, "give cron or rate, not both")
	case s.Cron == "" && s.Rate == "":
		return Schedule{}, Errorf(ErrInvalid, "give cron (five fields, and a time_zone) or rate (such as 30s, 5m, 1h)")
	case s.Rate != "" && s.TimeZone != "":
		return Schedule{}, Errorf(ErrInvalid, "time_zone is for a cron schedule; a rate counts real seconds")
	case s.Rate != "":
		if _, err := ParseRate(s.Rate); err != nil {
			return Schedule{}, err
		}
		m := ratePattern.FindStringSubmatch(s.Rate)
		s.Rate = m[1] + m[2] // one spelling: "rate(2s)" and "2 s" are stored as "2s"
		s.Anchor = now.Truncate(time.Second)
	default:
		if s.TimeZone == "" {
			s.TimeZone = "UTC"
		}
		if _, err := s.cron(); err != nil {
			return Schedule{}, err
		}
	}
	switch s.CatchUp {
	case "":
		s.CatchUp = CatchUpSkip
	case CatchUpSkip, CatchUpAll:
	default:
		return Schedule{}, Errorf(ErrInvalid, "catch_up %q is not one of %s, %s", Echo(s.CatchUp), CatchUpSkip, CatchUpAll)
	}
	switch s.Overlap {
	case "":
		s.Overlap = OverlapAllow
	case OverlapAllow, OverlapSkip:
	default:
		return Schedule{}, Errorf(ErrInvalid, "overlap %q is not one of %s, %s", Echo(s.Overlap), OverlapAllow, OverlapSkip)
	}
	if len(s.Task.Payload) > MaxSchedulePayload {
		return Schedule{}, Errorf(ErrTooLarge, "a schedule's payload is %d bytes; the limit is %d", len(s.Task.Payload), MaxSchedulePayload)
	}
	if len(s.Task.Payload) > 0 {
		if err := CheckJSON("payload", s.Task.Payload); err != nil {
			return Schedule{}, err
		}
		var b bytes.Buffer
		_ = json.Compact(&b, s.Task.Payload)
		s.Task.Payload = b.Bytes()
	}
	// The template must make a valid task: check it as the firing will build it.
	if _, err := New(s.TaskSpec(now), l, now, c); err != nil {
		return Schedule{}, err
	}
	next, err := s.Next(now)
	if err != nil {
		return Schedule{}, err
	}
	s.NextFire = next
	s.Spec = spec.fingerprint(s)
	return s, nil
}

func (spec ScheduleSpec) fingerprint(s Schedule) string {
	b, _ := json.Marshal([]any{s.Lambda, s.ID, s.Cron, s.TimeZone, s.Rate, s.Task, s.CatchUp, s.Overlap})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// cronSchedule is a parsed cron expression in its time zone.
type cronSchedule struct {
	spec *cron.SpecSchedule
	loc  *time.Location
	// everyHour: the hour field takes every hour, so the schedule counts real hours across a
	// DST change (see next).
	everyHour bool
}

func (s Schedule) cron() (cronSchedule, error) {
	if strings.HasPrefix(s.Cron, "TZ=") || strings.HasPrefix(s.Cron, "CRON_TZ=") {
		return cronSchedule{}, Errorf(ErrInvalid, "cron %q: give the time zone as time_zone", Echo(s.Cron))
	}
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil || s.TimeZone == "Local" {
		return cronSchedule{}, Errorf(ErrInvalid, "time_zone %q is not an IANA time zone name, such as Europe/Berlin or UTC", Echo(s.TimeZone))
	}
	parsed, err := cronParser.Parse(s.Cron)
	if err != nil {
		return cronSchedule{}, Errorf(ErrInvalid, "cron %q: %v (five fields: minute hour day-of-month month day-of-week)", Echo(s.Cron), err)
	}
	spec := parsed.(*cron.SpecSchedule)
	spec.Location = loc
	const hours = 1<<24 - 1
	return cronSchedule{spec: spec, loc: loc, everyHour: spec.Hour&hours == hours}, nil
}

// next returns the first fire time strictly after t, or zero if there is none within five years
// (as for February 30th).
//
// Across a DST change: a schedule whose hour field takes every hour fires by real time, every
// real hour's matching minutes, both of a repeated hour and none of a skipped one (there is none).
// One with fixed hours fires each matching wall-clock time once, as RFC 5545 (iCalendar) and
// JavaScript Temporal's "compatible" disambiguation read it: a time that comes twice when clocks
// go back fires at its first coming, and a time that a change skips is read with the UTC offset
// from before the change, that is shifted forward by the gap (02:30 in Berlin on the day clocks go
// forward fires at 03:30 CEST, 02:00 at 03:00 CEST). Wall-clock times that land on one instant
// fire once there.
func (c cronSchedule) next(t time.Time) time.Time {
	if c.everyHour {
		return c.spec.Next(t).UTC()
	}
	// Walk wall-clock times (the library's Next in UTC over wall clocks), each mapped to its
	// instant, for the smallest instant after t. Shifted times break the order: a time shifted by
	// a gap g lands after the times up to g later. So the walk starts g before t's wall clock when
	// t is within g after a change, and goes on for g past a time that was shifted.
	utcSpec := *c.spec
	utcSpec.Location = time.UTC
	wall := wallClock(t.In(c.loc)).Add(-c.gapBefore(t))
	var best, until time.Time
	for range 4 * 24 * 60 { // a guard: the walk reads the wall-clock minutes of a gap or two
		w := utcSpec.Next(wall)
		if w.IsZero() || !until.IsZero() && !w.Before(until) {
			break
		}
		if at, gap := c.fromWall(w); at.After(t) {
			if best.IsZero() || at.Before(best) {
				best = at
			}
			if end := w.Add(gap); end.After(until) {
				until = end
			}
		}
		wall = w
	}
	return best.UTC()
}

// wallClock returns the wall clock of local as the same reading in UTC.
func wallClock(local time.Time) time.Time {
	return time.Date(local.Year(), local.Month(), local.Day(), local.Hour(), local.Minute(), local.Second(), local.Nanosecond(), time.UTC)
}

// gapBefore returns the gap of the change by which clocks went forward last before t, if t is
// within that gap's length after it, else 0.
func (c cronSchedule) gapBefore(t time.Time) time.Duration {
	start, _ := t.In(c.loc).ZoneBounds()
	if start.IsZero() {
		return 0
	}
	_, after := start.Zone()
	_, before := start.Add(-time.Nanosecond).Zone()
	if gap := time.Duration(after-before) * time.Second; gap > 0 && t.Sub(start) < gap {
		return gap
	}
	return 0
}

// fromWall returns the first instant whose wall clock in c.loc reads w (given in UTC), and 0. For
// a wall clock that a change skips, it returns the instant w names with the offset from before the
// change (the change plus w's distance into the gap), and the gap's length.
//
// It reads the zone's periods (ZoneBounds) around w rather than time.Date, which does not say on
// which side of a change it puts a skipped time.
func (c cronSchedule) fromWall(w time.Time) (time.Time, time.Duration) {
	// Every UTC offset is within a day, so the instants that read w are within a day of w in UTC.
	const span = 26 * time.Hour
	var shifted time.Time
	var shiftedGap time.Duration
	for at := w.Add(-span).In(c.loc); !at.After(w.Add(span)); {
		_, offset := at.Zone()
		start, end := at.ZoneBounds()
		u := w.Add(-time.Duration(offset) * time.Second)
		if (start.IsZero() || !u.Before(start)) && (end.IsZero() || u.Before(end)) {
			return u, 0 // the periods come in order, so this is the first instant that reads w
		}
		if end.IsZero() {
			break
		}
		at = end
		_, next := at.Zone()
		if gap := time.Duration(next-offset) * time.Second; shifted.IsZero() && gap > 0 && !u.Before(end) && u.Add(-gap).Before(end) {
			shifted, shiftedGap = u, gap // skipped at this change, unless a later period reads w
		}
	}
	return shifted, shiftedGap
}

// Next returns the first fire time of s strictly after t.
func (s Schedule) Next(t time.Time) (time.Time, error) {
	if s.Rate != "" {
		d, err := ParseRate(s.Rate)
		if err != nil {
			return time.Time{}, err
		}
		if t.Before(s.Anchor) {
			return s.Anchor, nil
		}
		k := t.Sub(s.Anchor)/d + 1
		return s.Anchor.Add(k * d).UTC(), nil
	}
	c, err := s.cron()
	if err != nil {
		return time.Time{}, err
	}
	next := c.next(t)
	if next.IsZero() {
		return time.Time{}, Errorf(ErrInvalid, "cron %q never fires", Echo(s.Cron))
	}
	return next, nil
}

// Upcoming returns the next n fire times from the schedule's next firing on (NextFire included),
// in the schedule's zone (Location). A paused schedule has none: it fires again only once resumed.
func (s Schedule) Upcoming(n int) []time.Time {
	if s.State == SchedulePaused {
		return nil
	}
	loc := s.Location()
	t := s.NextFire
	out := make([]time.Time, 0, n)
	for len(out) < n && !t.IsZero() {
		out = append(out, t.In(loc))
		next, err := s.Next(t)
		if err != nil {
			break
		}
		t = next
	}
	return out
}

// Location is the zone the schedule's fire times are shown in: a cron schedule's time zone, UTC
// for a rate.
func (s Schedule) Location() *time.Location {
	if s.Cron == "" {
		return time.UTC
	}
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil {
		return time.UTC // not stored: NewSchedule checks the zone
	}
	return loc
}

// FireID is the id of the task that a schedule of id scheduleID and incarnation creates at its
// firing at: the schedule's id, the fire time to the second and the incarnation's tag, such as
// nightly:20261125T023000Z.K7F3M2Q9XA. The tag tells the firings of a schedule deleted and created
// again under its id from the old one's, so that a task the old one made ahead (and its delete
// cancelled) holds no firing of the new one. A schedule stored before incarnations has none, and
// its ids no tag. Ids of one incarnation sort by time; an id is at most 128 characters.
func FireID(scheduleID, incarnation string, at time.Time) string {
	id := scheduleID + ":" + at.UTC().Format("20060102T150405Z")
	if incarnation == "" {
		return id
	}
	return id + "." + FireIDTag(incarnation)
}

// FireIDTag is the tag of an incarnation in its firings' ids: its first characters.
func FireIDTag(incarnation string) string {
	return incarnation[:min(len(incarnation), fireIDTagLength)]
}

// fireIDTagLength is the length of an incarnation's tag in a firing's id: 50 random bits, which
// fills a task id (128 characters) under the longest schedule id.
const fireIDTagLength = 10

// FireID is the id of the task that s creates at its firing at.
func (s Schedule) FireID(at time.Time) string {
	return FireID(s.ID, s.Incarnation, at)
}

// TaskSpec is the request that creates the task of the firing at.
func (s Schedule) TaskSpec(at time.Time) Spec {
	at = at.UTC()
	return Spec{
		ID: s.FireID(at), Payload: s.Task.Payload, RunAt: &at, Priority: s.Task.Priority,
		Collection: s.Task.Collection, MaxAttempts: s.Task.MaxAttempts,
	}
}

// Firings returns the fire times of s that a pass at now makes, those from NextFire to horizon
// (now, or a little after it when the pass creates tasks ahead of their time), and the next fire
// time after them. Catch-up decides among those before now: skip keeps the latest, all the latest
// MaxCatchUp; those after now are all kept. It reads at most a bounded number of fire times,
// whatever the time since NextFire: a window before horizon that doubles until it holds enough.
func (s Schedule) Firings(now, horizon time.Time) (fires []time.Time, next time.Time, err error) {
	if s.NextFire.After(horizon) {
		return nil, s.NextFire, nil
	}
	keep := 1
	if s.CatchUp == CatchUpAll {
		keep = MaxCatchUp
	}
	for window := time.Minute; ; window *= 2 {
		from := horizon.Add(-window)
		if !from.After(s.NextFire) {
			from = s.NextFire
		}
		fires, next, err = s.between(from, horizon)
		if err != nil {
			return nil, time.Time{}, err
		}
		var missed int
		for _, f := range fires {
			if !f.After(now) {
				missed++
			}
		}
		if missed >= keep || from.Equal(s.NextFire) {
			// Drop the missed firings that catch-up leaves out: all but the latest keep.
			if missed > keep {
				fires = fires[missed-keep:]
			}
			return fires, next, nil
		}
	}
}

// between returns the fire times in [from, to] and the first one after to. Past maxFires it
// drops the earliest, down to the latest half: Firings wants at most the latest MaxCatchUp before
// now and the few after it, and its window keeps the count near that anyway; this bounds memory
// whatever the window.
func (s Schedule) between(from, to time.Time) ([]time.Time, time.Time, error) {
	const maxFires = 10 * MaxCatchUp
	var fires []time.Time
	t, err := s.Next(from.Add(-time.Nanosecond))
	for err == nil && !t.After(to) {
		fires = append(fires, t)
		if len(fires) > maxFires {
			fires = slices.Clone(fires[len(fires)-maxFires/2:])
		}
		t, err = s.Next(t)
	}
	return fires, t, err
}

// Fire returns s after the pass that made fires, those of Firings, of which the last that
// created a task (or found it there) was last (nil if none did), its next firing next.
func Fire(s Schedule, last *time.Time, next, now time.Time) Schedule {
	if last != nil {
		l := last.UTC()
		s.LastFire = &l
	}
	s.NextFire, s.UpdatedAt, s.Version = next, now.UTC(), s.Version+1
	return s
}

// PauseSchedule stops s from firing until ResumeSchedule.
func PauseSchedule(s Schedule, now time.Time) Schedule {
	if s.State == SchedulePaused {
		return s
	}
	s.State, s.UpdatedAt, s.Version = SchedulePaused, now.UTC(), s.Version+1
	return s
}

// ResumeSchedule makes a paused s fire again, from its first fire time after now: firings that
// fell while it was paused do not run.
func ResumeSchedule(s Schedule, now time.Time) (Schedule, error) {
	if s.State == ScheduleActive {
		return s, nil
	}
	next, err := s.Next(now)
	if err != nil {
		return Schedule{}, err
	}
	s.State, s.NextFire, s.UpdatedAt, s.Version = ScheduleActive, next, now.UTC(), s.Version+1
	return s, nil
}

// ScheduleUpdate is a request to change a schedule: the fields given replace the schedule's, those
// absent stay. A rate makes it a rate schedule; a cron a cron schedule, in the time zone given or
// the one it had (UTC after a rate); a time zone alone moves a cron schedule to that zone. A task
// template replaces the template whole.
type ScheduleUpdate struct {
	Cron     string    `json:"cron,omitempty"`
	TimeZone string    `json:"time_zone,omitempty"`
	Rate     string    `json:"rate,omitempty"`
	Task     *Template `json:"task,omitempty"`
	CatchUp  string    `json:"catch_up,omitempty"`
	Overlap  string    `json:"overlap,omitempty"`
	// Revision, unless 0, is the revision of the schedule the update was made against: the
	// update fails with ErrPrecondition if the schedule's definition changed since.
	Revision int64 `json:"revision,omitempty"`
	// FireIDTag, unless empty, is the fire_id_tag of the schedule the update was made against:
	// the update fails with ErrPrecondition if that schedule was deleted and another created
	// under its id since, whose revision restarts at 1 and may match Revision.
	FireIDTag string `json:"fire_id_tag,omitempty"`
}

// UpdateSchedule returns s changed by u, validated as a create is (NewSchedule).
//
// Its firings already made stand, those made ahead of their time included. An update that
// changes the fire times (cron, time zone or rate) fires from the first new fire time after now
// and after its latest firing (LastFire), so that no new firing shares a fire time, and so a
// task id, with one made before; a new rate counts from now. One that changes only the template
// or the policies keeps the fire times and the next firing.
func UpdateSchedule(s Schedule, u ScheduleUpdate, l Lambda, now time.Time, c Config) (Schedule, error) {
	revision := max(s.Revision, 1)
	if u.Revision != 0 && u.Revision != revision {
		return Schedule{}, Errorf(ErrPrecondition, "schedule %s is at revision %d, not %d: it was changed since; read it again", s, revision, u.Revision)
	}
	if u.FireIDTag != "" && u.FireIDTag != FireIDTag(s.Incarnation) {
		return Schedule{}, Errorf(ErrPrecondition, "schedule %s was deleted and created again since (its fire_id_tag is %s, not %s); read it again", s, FireIDTag(s.Incarnation), Echo(u.FireIDTag))
	}
	if u.Cron == "" && u.TimeZone == "" && u.Rate == "" && u.Task == nil && u.CatchUp == "" && u.Overlap == "" {
		return Schedule{}, Errorf(ErrInvalid, "give what to change: cron, time_zone, rate, task, catch_up or overlap")
	}
	spec := ScheduleSpec{ID: s.ID, Cron: s.Cron, TimeZone: s.TimeZone, Rate: s.Rate, Task: s.Task, CatchUp: s.CatchUp, Overlap: s.Overlap}
	switch {
	case u.Rate != "":
		spec.Cron, spec.TimeZone, spec.Rate = "", u.TimeZone, u.Rate // a time zone with a rate is refused
	case u.Cron != "":
		spec.Cron, spec.Rate = u.Cron, ""
		if u.TimeZone != "" {
			spec.TimeZone = u.TimeZone
		}
	case u.TimeZone != "":
		spec.TimeZone = u.TimeZone // refused for a rate schedule
	}
	if u.Task != nil {
		spec.Task = *u.Task
	}
	if u.CatchUp != "" {
		spec.CatchUp = u.CatchUp
	}
	if u.Overlap != "" {
		spec.Overlap = u.Overlap
	}
	next, err := NewSchedule(spec, l, now, c)
	if err != nil {
		return Schedule{}, err
	}
	next.CreatedAt, next.Incarnation, next.State, next.LastFire = s.CreatedAt, s.Incarnation, s.State, s.LastFire
	next.Version, next.Revision = s.Version+1, revision+1
	if next.Cron == s.Cron && next.TimeZone == s.TimeZone && next.Rate == s.Rate {
		next.Anchor, next.NextFire = s.Anchor, s.NextFire
		return next, nil
	}
	from := now.UTC()
	if s.LastFire != nil && s.LastFire.After(from) {
		from = *s.LastFire
	}
	if next.NextFire, err = next.Next(from); err != nil {
		return Schedule{}, err
	}
	return next, nil
}
