package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/openatf/atf/shared/adapter/httpapi"
	"github.com/openatf/atf/shared/client"
	"github.com/openatf/atf/shared/task"
)

// atf schedule --file: one schedule body a line (JSON lines), sent in batches through the batch
// endpoint. A batch is all or none, so when the API refuses one for what a task holds (a bad
// field, an id reused with another body, an unknown lambda), its lines are sent again one by one,
// to create the good ones and name the bad ones by line number.

// fileBatchBytes bounds the lines of one batch, under the API's body limit with room for the
// envelope and the re-encoding of each body.
const fileBatchBytes = httpapi.BatchBodyLimit * 3 / 4

// fileBatchTimeout bounds each request of a file: a file takes as long as it needs.
const fileBatchTimeout = 30 * time.Second

// maxFailuresShown is how many failed lines the summary lists; it counts them all.
const maxFailuresShown = 1000

// throttleRetries is how often a batch refused with 429 (throttled, nothing done) is sent again.
const throttleRetries = 5

// fileSummary is what `atf schedule --file` did.
type fileSummary struct {
	File     string        `json:"file"`
	Lines    int           `json:"lines"` // lines read, blank ones included
	Created  int           `json:"created"`
	Replayed int           `json:"replayed"` // the same body with the same id was sent before
	Failed   int           `json:"failed"`
	Failures []lineFailure `json:"failures"` // the first maxFailuresShown
	// Stopped says why the command stopped before the end of the file: an error that is not a
	// line's (the API unreachable, a 5xx, the token refused). The lines after it were not sent.
	Stopped string `json:"stopped,omitempty"`
}

type lineFailure struct {
	Line  int    `json:"line"`
	Error string `json:"error"`
}

// err is the command's error once the summary is printed: some lines failed.
func (s fileSummary) err() error {
	switch {
	case s.Stopped != "":
		return fmt.Errorf("stopped after line %d: %s", s.Lines, s.Stopped)
	case s.Failed > 0:
		return fmt.Errorf("%d of the file's tasks failed", s.Failed)
	}
	return nil
}

func (s *fileSummary) fail(line int, err string) {
	s.Failed++
	if len(s.Failures) < maxFailuresShown {
		s.Failures = append(s.Failures, lineFailure{line, err})
	}
}

// fileLine is a line to send: its number and body.
type fileLine struct {
	n   int
	req client.ScheduleRequest
}

// progressOut is where the progress goes: a bar on a terminal, a line a batch otherwise.
var progressOut io.Writer = os.Stderr

// scheduleFile runs `atf schedule [LAMBDA] --file F`: LAMBDA is the lambda of lines that name
// none. F is "-" for standard input.
func scheduleFile(ctx context.Context, c *client.Client, defaultLambda, name string) (fileSummary, error) {
	sum := fileSummary{File: name, Failures: []lineFailure{}}
	var in io.Reader = os.Stdin
	total := int64(-1) // unknown: a spinner
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return sum, err
		}
		defer f.Close()
		if n, err := countLines(f); err == nil {
			total = int64(n)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return sum, err
		}
		in = f
	}
	p := newProgress(total)
	defer p.finish(&sum)
	ctx = context.WithoutCancel(ctx) // each request has its own deadline
	r := bufio.NewReaderSize(in, 64<<10)
	var batch []fileLine
	size := 0
	send := func() bool {
		ok := sendLines(ctx, c, batch, &sum)
		p.add(len(batch), &sum)
		batch, size = batch[:0], 0
		return ok
	}
	for {
		line, tooLong, err := readLine(r, httpapi.BatchBodyLimit)
		if err == io.EOF {
			break
		}
		if err != nil {
			return sum, err
		}
		sum.Lines++
		n := sum.Lines
		if len(bytes.TrimSpace(line)) == 0 && !tooLong {
			p.skip(1)
			continue
		}
		req, perr := parseLine(line, tooLong, defaultLambda)
		if perr != nil {
			sum.fail(n, perr.Error())
			p.skip(1)
			continue
		}
		if len(batch) == task.MaxBatch || len(batch) > 0 && size+len(line) > fileBatchBytes {
			if !send() {
				return sum, nil
			}
		}
		batch = append(batch, fileLine{n, req})
		size += len(line)
	}
	if len(batch) > 0 {
		send()
	}
	return sum, nil
}

// parseLine reads a schedule body. Its lambda is the line's "lambda", or else defaultLambda.
func parseLine(line []byte, tooLong bool, defaultLambda string) (client.ScheduleRequest, error) {
	var req client.ScheduleRequest
	if tooLong {
		return req, fmt.Errorf("longer than %d bytes", httpapi.BatchBodyLimit)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("not a schedule body: %v", err)
	}
	if dec.More() {
		return req, errors.New("more than one JSON value on the line")
	}
	if req.Lambda == "" {
		req.Lambda = defaultLambda
	}
	if req.Lambda == "" {
		return req, errors.New(`no lambda: give "lambda" on the line, or atf schedule LAMBDA --file`)
	}
	return req, nil
}

// sendLines sends a batch, and its lines one by one if the API refuses the batch for what a task
// holds. It returns false if the command must stop: the error is not a line's.
func sendLines(ctx context.Context, c *client.Client, lines []fileLine, sum *fileSummary) bool {
	reqs := make([]client.ScheduleRequest, len(lines))
	for i, l := range lines {
		reqs[i] = l.req
	}
	var created bool
	err := retryThrottled(ctx, func(ctx context.Context) (err error) {
		_, created, err = c.ScheduleBatch(ctx, lines[0].req.Lambda, reqs)
		return err
	})
	switch {
	case err == nil && created:
		sum.Created += len(lines)
		return true
	case err == nil:
		sum.Replayed += len(lines)
		return true
	case !linesFault(err):
		for _, l := range lines {
			sum.fail(l.n, err.Error())
		}
		sum.Stopped = err.Error()
		return false
	}
	// Nothing of the batch was created: find the lines at fault.
	for _, l := range lines {
		req := l.req
		req.Lambda = "" // a single schedule takes its lambda from the path
		err := retryThrottled(ctx, func(ctx context.Context) (err error) {
			_, created, err = c.Schedule(ctx, l.req.Lambda, req)
			return err
		})
		switch {
		case err == nil && created:
			sum.Created++
		case err == nil:
			sum.Replayed++
		case !linesFault(err):
			sum.fail(l.n, err.Error())
			sum.Stopped = err.Error()
			return false
		default:
			sum.fail(l.n, err.Error())
		}
	}
	return true
}

// linesFault tells whether the API refused a request for what its tasks hold, with nothing
// done, as opposed to an error of the connection, the server or the credentials.
func linesFault(err error) bool {
	var apiErr *client.Error
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.Status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// retryThrottled calls f, on a deadline of its own, and again after a pause while the API
// answers 429 (it did nothing), at most throttleRetries more times.
func retryThrottled(ctx context.Context, f func(context.Context) error) error {
	for try := 0; ; try++ {
		rctx, cancel := context.WithTimeout(ctx, fileBatchTimeout)
		err := f(rctx)
		cancel()
		var apiErr *client.Error
		if try == throttleRetries || !errors.As(err, &apiErr) || apiErr.Status != http.StatusTooManyRequests {
			return err
		}
		time.Sleep(time.Duration(try+1) * time.Second)
	}
}

// readLine reads a line without its end. A line longer than limit comes back cut, with tooLong.
func readLine(r *bufio.Reader, limit int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > limit+1 {
			tooLong = true
		} else {
			line = append(line, chunk...)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && (len(line) > 0 || tooLong):
			return line, tooLong, nil
		case err != nil:
			return nil, false, err
		}
		return bytes.TrimRight(line, "\r\n"), tooLong, nil
	}
}

// countLines counts the lines of r, for the progress bar's total.
func countLines(r io.Reader) (int, error) {
	buf := make([]byte, 64<<10)
	n, last := 0, byte('\n')
	for {
		k, err := r.Read(buf)
		chunk := buf[:k]
		n += bytes.Count(chunk, []byte{'\n'})
		if len(chunk) > 0 {
			last = chunk[len(chunk)-1]
		}
		if err == io.EOF {
			if last != '\n' {
				n++
			}
			return n, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// progress shows how far a file is: a bar on a terminal, else a line after each batch.
type progress struct {
	bar   *progressbar.ProgressBar // nil when not on a terminal
	out   io.Writer
	total int64
	done  int
}

func newProgress(total int64) *progress {
	p := &progress{out: progressOut, total: total}
	if f, ok := progressOut.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(f), progressbar.OptionSetDescription("scheduling"),
			progressbar.OptionShowCount(), progressbar.OptionSetItsString("lines"), progressbar.OptionShowIts(),
			progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish())
	}
	return p
}

// add counts a batch's lines.
func (p *progress) add(lines int, s *fileSummary) {
	p.skip(lines)
	if p.bar != nil {
		return
	}
	of := ""
	if p.total >= 0 {
		of = fmt.Sprintf(" of %d", p.total)
	}
	fmt.Fprintf(p.out, "lines %d%s: %d created, %d replayed, %d failed\n", p.done, of, s.Created, s.Replayed, s.Failed)
}

// skip counts lines not sent (blank, or failed before sending): the bar moves, no line printed.
func (p *progress) skip(lines int) {
	p.done += lines
	if p.bar != nil {
		_ = p.bar.Add(lines)
	}
}

func (p *progress) finish(s *fileSummary) {
	// Lines that failed to parse are counted at once, those of a batch once it is sent.
	slices.SortStableFunc(s.Failures, func(a, b lineFailure) int { return cmp.Compare(a.Line, b.Line) })
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

func printFileSummary(w io.Writer, s fileSummary) {
	fmt.Fprintf(w, "created:\t%d\n", s.Created)
	fmt.Fprintf(w, "replayed:\t%d\n", s.Replayed)
	fmt.Fprintf(w, "failed:\t%d\n", s.Failed)
	for _, f := range s.Failures {
		fmt.Fprintf(w, "  line %d:\t%s\n", f.Line, oneLine(f.Error))
	}
	if s.Failed > len(s.Failures) {
		fmt.Fprintf(w, "  ... and %d more\n", s.Failed-len(s.Failures))
	}
	if s.Stopped != "" {
		fmt.Fprintf(w, "stopped after line %d:\t%s; the lines after it were not sent\n", s.Lines, s.Stopped)
	}
}

// oneLine is s on one line, its tabs and line ends as spaces.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
