package task

import (
	"archive/zip"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // every zone loads, whatever the machine has installed
)

// zoneCron is a cron of TestCronEveryZone with its own reading of a wall clock, written apart from
// the cron parser: matches says whether the cron names a wall-clock time.
type zoneCron struct {
	cron    string
	matches func(w time.Time) bool
}

func dailyAt(hour, minute int) zoneCron {
	return zoneCron{fmt.Sprintf("%d %d * * *", minute, hour), func(w time.Time) bool {
		return w.Hour() == hour && w.Minute() == minute
	}}
}

var zoneCrons = []zoneCron{
	dailyAt(0, 0), dailyAt(0, 30), dailyAt(1, 0), dailyAt(2, 0), dailyAt(2, 30), dailyAt(3, 0),
	{"0 * * * *", func(w time.Time) bool { return w.Minute() == 0 }},
	{"*/15 * * * *", func(w time.Time) bool { return w.Minute()%15 == 0 }},
	// Most changes fall on a Sunday, some on a Friday (Egypt, Palestine, Israel) at midnight.
	{"30 2 * * 0", func(w time.Time) bool { return w.Weekday() == time.Sunday && w.Hour() == 2 && w.Minute() == 30 }},
	{"0 0 * * 5", func(w time.Time) bool { return w.Weekday() == time.Friday && w.Hour() == 0 && w.Minute() == 0 }},
	{"0 0 1 * *", func(w time.Time) bool { return w.Day() == 1 && w.Hour() == 0 && w.Minute() == 0 }},
	// 2030-03-31 and 2027-10-31 are days of the European changes.
	{"30 2 31 * *", func(w time.Time) bool { return w.Day() == 31 && w.Hour() == 2 && w.Minute() == 30 }},
}

// TestCronEveryZone: in every zone of Go's time zone database, over 2026 to 2030, each cron of
// zoneCrons fires exactly the instants that the documented rule gives, as an oracle that reads
// wall clocks in 15-minute steps of real time computes them: a cron with fixed hours fires each
// matching wall-clock time once, at its first coming, or, when a change skips it, with the offset
// from before the change; a cron that takes every hour fires at every instant whose wall clock
// matches. The firings come in strictly increasing order, none is missed or doubled, and from
// a second before a firing (of a cron with fixed hours) that firing is the next.
//
// Zones whose UTC offsets and changes over the years checked are the same (their lists of changes
// from ZoneBounds are equal) fire alike, so one zone of each such group runs. The crons with fixed
// hours run over the five years; those that take every hour (a firing every 15 minutes is 175,000
// of them) over the two days either side of each change and the first week, which keeps the test
// to seconds: away from a change they fire as in a zone without one.
func TestCronEveryZone(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	end := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	const margin = 3 * 24 * time.Hour
	groups := map[string][]string{}
	names := zoneNames(t)
	for _, name := range names {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatalf("zone %s: %v", name, err)
		}
		key := fmt.Sprint(offsetChanges(loc, start.Add(-margin), end.Add(margin)))
		groups[key] = append(groups[key], name)
	}
	keys := make([]string, 0, len(groups))
	for key := range groups {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	t.Logf("%d zones in %d groups of alike offsets and changes", len(names), len(keys))
	for _, key := range keys {
		zones := groups[key]
		t.Run(zones[0], func(t *testing.T) {
			t.Parallel()
			loc, _ := time.LoadLocation(zones[0])
			walls := wallClocks(t, loc, start.Add(-margin), end.Add(margin))
			windows := [][2]time.Time{{start, start.Add(7 * 24 * time.Hour)}}
			for _, change := range offsetChanges(loc, start, end)[1:] {
				windows = append(windows, [2]time.Time{change.at.Add(-2 * 24 * time.Hour), change.at.Add(2 * 24 * time.Hour)})
			}
			for _, zc := range zoneCrons {
				c, err := Schedule{Cron: zc.cron, TimeZone: zones[0]}.cron()
				if err != nil {
					t.Fatal(err)
				}
				want := walls.firings(t, zc, c.everyHour)
				for _, w := range windowsFor(c.everyHour, windows, start, end) {
					var got []time.Time
					for at := c.next(w[0]); !at.IsZero() && !at.After(w[1]); at = c.next(at) {
						if n := len(got); n > 0 && !at.After(got[n-1]) {
							t.Fatalf("%s in %s (and %d alike zones): %s after %s", zc.cron, zones[0], len(zones)-1, at, got[n-1])
						}
						// From just before a firing, that firing is next: a time shifted past
						// later wall clocks is found from inside the gap too.
						if before := c.next(at.Add(-time.Second)); !c.everyHour && !before.Equal(at) {
							t.Fatalf("%s in %s: from a second before %s, next is %s", zc.cron, zones[0], at, before)
						}
						got = append(got, at)
					}
					wantIn := between(want, w[0], w[1])
					if i := firstDifference(got, wantIn); i >= 0 {
						t.Errorf("%s in %s (and %d alike zones %v) from %s: firing %d: got %s, want %s",
							zc.cron, zones[0], len(zones)-1, zones[1:min(len(zones), 4)], w[0].Format(time.RFC3339), i, show(got, i, loc), show(wantIn, i, loc))
					}
				}
			}
		})
	}
}

// windowsFor returns the spans a cron is checked over: the whole of [start, end] for one with
// fixed hours, those around the changes for one that takes every hour.
func windowsFor(everyHour bool, aroundChanges [][2]time.Time, start, end time.Time) [][2]time.Time {
	if everyHour {
		return aroundChanges
	}
	return [][2]time.Time{{start, end}}
}

// zoneNames reads the names of the zones in Go's time zone database, the one that time/tzdata
// embeds, from its source, $GOROOT/lib/time/zoneinfo.zip.
func zoneNames(t *testing.T) []string {
	goroot := os.Getenv("GOROOT")
	if goroot == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			t.Fatalf("go env GOROOT: %v", err)
		}
		goroot = strings.TrimSpace(string(out))
	}
	r, err := zip.OpenReader(filepath.Join(goroot, "lib", "time", "zoneinfo.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var names []string
	for _, f := range r.File {
		if !f.FileInfo().IsDir() {
			names = append(names, f.Name)
		}
	}
	if len(names) < 300 {
		t.Fatalf("%d zones in %s: the database has some 600", len(names), goroot)
	}
	return names
}

type offsetChange struct {
	at     time.Time
	offset int
}

// offsetChanges lists loc's UTC offset at from and each change of it up to to, from ZoneBounds.
func offsetChanges(loc *time.Location, from, to time.Time) []offsetChange {
	var changes []offsetChange
	for at := from.In(loc); at.Before(to); {
		if _, offset := at.Zone(); len(changes) == 0 || offset != changes[len(changes)-1].offset {
			changes = append(changes, offsetChange{at.UTC(), offset})
		}
		_, end := at.ZoneBounds()
		if end.IsZero() {
			break
		}
		at = end
	}
	return changes
}

// zoneWalls is the oracle's reading of a zone, every 15 minutes of real time (Unix seconds): each
// instant with its wall clock (written in UTC), by instant and by wall clock, and the gaps where
// clocks went forward.
type zoneWalls struct {
	reads, byWall []instantWall
	gaps          []gap
}

type instantWall struct{ at, wall int64 }

// gap: the wall clocks after last's and before next's were skipped.
type gap struct{ last, next instantWall }

const quarter = 15 * 60

func wallClocks(t *testing.T, loc *time.Location, from, to time.Time) zoneWalls {
	var z zoneWalls
	for u := from.Unix() / quarter * quarter; u < to.Unix(); u += quarter {
		_, offset := time.Unix(u, 0).In(loc).Zone()
		if offset%quarter != 0 {
			t.Fatalf("%s: offset %d s at %d is not a multiple of 15 minutes: the oracle's step would miss wall clocks", loc, offset, u)
		}
		read := instantWall{u, u + int64(offset)}
		if n := len(z.reads); n > 0 && read.wall > z.reads[n-1].wall+quarter {
			z.gaps = append(z.gaps, gap{z.reads[n-1], read})
		}
		z.reads = append(z.reads, read)
	}
	z.byWall = slices.Clone(z.reads)
	slices.SortFunc(z.byWall, func(a, b instantWall) int { return cmp.Or(cmp.Compare(a.wall, b.wall), cmp.Compare(a.at, b.at)) })
	return z
}

// instantOf returns the instant at which a wall clock w fires by the documented rule: its first
// reading, or if no instant reads it, the one it names in the offset from before the change that
// skipped it.
func (z zoneWalls) instantOf(t *testing.T, w int64) int64 {
	if i, _ := slices.BinarySearchFunc(z.byWall, w, func(r instantWall, w int64) int { return cmp.Compare(r.wall, w) }); i < len(z.byWall) && z.byWall[i].wall == w {
		return z.byWall[i].at
	}
	for _, g := range z.gaps {
		if g.last.wall < w && w < g.next.wall {
			return g.last.at + (w - g.last.wall)
		}
	}
	t.Fatalf("oracle: wall clock %s is neither read nor skipped", time.Unix(w, 0).UTC())
	return 0
}

// firings returns the instants at which zc fires by the documented rule, in order: for a cron
// that takes every hour, every instant whose wall clock matches; for one with fixed hours, each
// matching wall clock's instantOf (two wall clocks on one instant are one firing).
func (z zoneWalls) firings(t *testing.T, zc zoneCron, everyHour bool) []time.Time {
	var out []time.Time
	if everyHour {
		for _, r := range z.reads {
			if zc.matches(time.Unix(r.wall, 0).UTC()) {
				out = append(out, time.Unix(r.at, 0).UTC())
			}
		}
		return out
	}
	set := map[int64]bool{}
	// Every wall clock from the first read to the last.
	for w := z.reads[0].wall; w <= z.reads[len(z.reads)-1].wall; w += quarter {
		if zc.matches(time.Unix(w, 0).UTC()) {
			set[z.instantOf(t, w)] = true
		}
	}
	for at := range set {
		out = append(out, time.Unix(at, 0).UTC())
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// between returns the times of sorted in (from, to].
func between(sorted []time.Time, from, to time.Time) []time.Time {
	i, _ := slices.BinarySearchFunc(sorted, from, func(a, b time.Time) int {
		if !a.After(b) {
			return -1
		}
		return 1
	})
	j, _ := slices.BinarySearchFunc(sorted, to, func(a, b time.Time) int {
		if !a.After(b) {
			return -1
		}
		return 1
	})
	return sorted[i:j]
}

// firstDifference returns the first index at which got and want differ, or -1.
func firstDifference(got, want []time.Time) int {
	for i := range max(len(got), len(want)) {
		if i >= len(got) || i >= len(want) || !got[i].Equal(want[i]) {
			return i
		}
	}
	return -1
}

// show writes fires[i] and its neighbours in UTC and in loc.
func show(fires []time.Time, i int, loc *time.Location) string {
	var parts []string
	for j := max(0, i-1); j < min(len(fires), i+2); j++ {
		parts = append(parts, fires[j].Format("2006-01-02T15:04Z")+" ("+fires[j].In(loc).Format("15:04 -07:00")+")")
	}
	if i >= len(fires) {
		parts = append(parts, "none")
	}
	return strings.Join(parts, ", ")
}
