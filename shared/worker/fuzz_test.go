package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

// FuzzProtocol fuzzes both sides of the program protocol without starting a process.
//
// The program side, serve (what Main runs): the payload stdin carries, the ATF_* environment (env
// holds KEY=VALUE lines) and what the handler does (mode: echo the payload, return out, fail
// retriably or fatally with out as the message, panic with it, return nothing, fail wrapping
// ErrFatal, or stdin fails; its high bits set the chunk size of the host-side writes).
// The handler gets the task the environment describes and the trimmed payload; the exit code is
// 0, ExitRetry (also for a panic and an unreadable stdin) or 1; stdout is the result exactly and
// only on success, stderr the error and only on failure.
//
// The host side, what Program.Handle makes of a program's output: result turns any stdout into
// nothing (blank), the same JSON compacted, or, for text that is not JSON, a JSON string of it;
// tailBuffer keeps exactly the last bytes of stderr however it is written, and the error message
// it makes is valid UTF-8, at most StderrTail bytes, and the whole stderr if that is short;
// limitedBuffer drops stdout over its limit and says so. serve's own output is fed through them
// too, as the host would read it.
func FuzzProtocol(f *testing.F) {
	env := "ATF_TASK_ID=t-1\nATF_LAMBDA=send-email\nATF_ATTEMPT=2\nATF_COLLECTION=marketing\nATF_PRIORITY=high"
	f.Add([]byte(`{"to":"a@b.c"}`), env, uint8(0), []byte(nil), uint16(2048))
	f.Add([]byte(" \n{\"to\": \"a@b.c\"}\n"), env, uint8(1), []byte(`{"sent": true, "id": 7}`), uint16(16))
	f.Add([]byte(`{}`), "ATF_ATTEMPT=x", uint8(1), []byte("done\n"), uint16(3))
	f.Add([]byte(`{}`), env, uint8(2), []byte("busy, later"), uint16(5))
	f.Add([]byte(`{}`), env, uint8(3), []byte("bad input\xff\xfe"), uint16(1))
	f.Add([]byte(`{}`), "", uint8(4), []byte("nil map"), uint16(0))
	f.Add([]byte(`{}`), env, uint8(5), []byte(nil), uint16(64))
	f.Add([]byte(nil), env, uint8(6), []byte(nil), uint16(64))
	f.Add([]byte(`{}`), env, uint8(7), []byte("   "), uint16(2))
	f.Add([]byte(`{}`), env, uint8(1), []byte(`"\u00e9" `+"\"\xff\""), uint16(4))

	f.Fuzz(func(t *testing.T, stdin []byte, env string, mode uint8, out []byte, limit uint16) {
		checkServe(t, stdin, env, mode, out)
		checkResult(t, out)
		chunk := 1 + int(mode>>3)
		checkTail(t, out, int(limit)%(2*StderrTail)+1, chunk)
		checkTail(t, out, StderrTail, chunk)
		checkLimited(t, out, int(limit), chunk)
	})
}

func checkServe(t *testing.T, stdin []byte, env string, mode uint8, out []byte) {
	vars := map[string]string{}
	for line := range strings.Lines(env) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		vars[k] = v
	}
	getenv := func(k string) string { return vars[k] }
	attempt, _ := strconv.Atoi(vars["ATF_ATTEMPT"])
	want := Task{ID: vars["ATF_TASK_ID"], Lambda: vars["ATF_LAMBDA"], Collection: vars["ATF_COLLECTION"],
		Priority: vars["ATF_PRIORITY"], Attempt: attempt, Payload: bytes.TrimSpace(stdin)}

	mode %= 8
	var in io.Reader = bytes.NewReader(stdin)
	readErr := errors.New("stdin broke")
	if mode == 5 {
		in = io.MultiReader(bytes.NewReader(stdin), iotest.ErrReader(readErr))
	}
	called := false
	h := HandlerFunc(func(ctx context.Context, got Task) (json.RawMessage, error) {
		called = true
		if got.ID != want.ID || got.Lambda != want.Lambda || got.Collection != want.Collection || got.Priority != want.Priority ||
			got.Attempt != want.Attempt || !bytes.Equal(got.Payload, want.Payload) {
			t.Errorf("handler got %+v, want %+v", got, want)
		}
		switch mode {
		case 0:
			return got.Payload, nil
		case 1:
			return out, nil
		case 2:
			return nil, errors.New(string(out))
		case 3:
			return nil, Fatal(errors.New(string(out)))
		case 4:
			panic(string(out))
		case 7:
			return nil, fmt.Errorf("%s: %w", out, ErrFatal)
		}
		return nil, nil
	})
	var stdout, stderr bytes.Buffer
	code := serve(context.Background(), h, in, &stdout, &stderr, getenv)

	wantCode, wantStdout, wantStderr := 0, []byte(nil), ""
	switch mode {
	case 0:
		wantStdout = want.Payload
	case 1:
		wantStdout = out
	case 2:
		wantCode, wantStderr = ExitRetry, string(out)+"\n"
	case 3:
		wantCode, wantStderr = 1, string(out)+"\n"
	case 4:
		wantCode, wantStderr = ExitRetry, "handler panicked: "+string(out)+"\n"
	case 5:
		wantCode, wantStderr = ExitRetry, "read payload: "+readErr.Error()+"\n"
	case 7:
		wantCode, wantStderr = 1, string(out)+": fatal\n"
	}
	if called == (mode == 5) {
		t.Errorf("mode %d: handler called %v", mode, called)
	}
	if code != wantCode || !bytes.Equal(stdout.Bytes(), wantStdout) {
		t.Errorf("mode %d: exit %d, stdout %q; want exit %d, stdout %q", mode, code, stdout.Bytes(), wantCode, wantStdout)
	}
	if mode == 4 { // the stack follows the message
		if !strings.HasPrefix(stderr.String(), strings.TrimSuffix(wantStderr, "\n")) {
			t.Errorf("panic: stderr %q, want it to start with %q", stderr.String(), wantStderr)
		}
	} else if stderr.String() != wantStderr {
		t.Errorf("mode %d: stderr %q, want %q", mode, stderr.String(), wantStderr)
	}

	// The host reads it back.
	if code == 0 {
		checkResult(t, stdout.Bytes())
		return
	}
	exit := errors.New("exit status " + strconv.Itoa(code))
	tail := tailBuffer{limit: StderrTail}
	tail.Write(stderr.Bytes())
	msg := tail.message(exit)
	if len(msg) > StderrTail || !utf8.ValidString(msg) {
		t.Errorf("error message of %d bytes (valid UTF-8 %v), over %d or not UTF-8", len(msg), utf8.ValidString(msg), StderrTail)
	}
	if s := strings.TrimSpace(stderr.String()); s == "" && msg != exit.Error() || s != "" && stderr.Len() <= StderrTail && utf8.ValidString(s) && msg != s {
		t.Errorf("stderr %q became error %q", stderr.String(), msg)
	}
}

// checkResult: what the host makes of a program's stdout.
func checkResult(t *testing.T, out []byte) {
	res := result(out)
	trimmed := bytes.TrimSpace(out)
	switch {
	case len(trimmed) == 0:
		if res != nil {
			t.Errorf("blank stdout %q became result %q, want none", out, res)
		}
	case json.Valid(trimmed):
		var b bytes.Buffer
		json.Compact(&b, res)
		if !bytes.Equal(b.Bytes(), res) || !sameValue(res, trimmed) {
			t.Errorf("JSON stdout %q became %q, want it compacted", out, res)
		}
	default:
		var s string
		if err := json.Unmarshal(res, &s); err != nil || !utf8.Valid(res) {
			t.Errorf("text stdout %q became %q, not a JSON string: %v", out, res, err)
		}
		if utf8.Valid(trimmed) && s != string(trimmed) {
			t.Errorf("text stdout %q became the string %q", out, s)
		}
	}
}

// checkTail writes data in chunks to a tailBuffer of the limit: it keeps exactly the last bytes.
func checkTail(t *testing.T, data []byte, limit, chunk int) {
	b := tailBuffer{limit: limit}
	for p := range slices.Chunk(data, chunk) {
		if n, err := b.Write(p); n != len(p) || err != nil {
			t.Fatalf("tail write: %d, %v", n, err)
		}
	}
	if want := data[max(0, len(data)-limit):]; !bytes.Equal(b.buf, want) {
		t.Fatalf("tail of %d bytes (limit %d, chunks of %d) kept %q, want %q", len(data), limit, chunk, b.buf, want)
	}
	fallback := errors.New("exit status 3")
	msg := b.message(fallback)
	if s := strings.TrimSpace(strings.ToValidUTF8(string(b.buf), "")); s == "" && msg != fallback.Error() || s != "" && msg != s {
		t.Fatalf("tail %q made the message %q", b.buf, msg)
	}
	if msg != fallback.Error() && (len(msg) > limit || !utf8.ValidString(msg)) {
		t.Fatalf("message of %d bytes for a limit of %d (valid UTF-8 %v)", len(msg), limit, utf8.ValidString(msg))
	}
}

// checkLimited writes data in chunks to a limitedBuffer: it holds it all, or says it is over.
func checkLimited(t *testing.T, data []byte, limit, chunk int) {
	b := limitedBuffer{limit: limit}
	for p := range slices.Chunk(data, chunk) {
		if n, err := b.Write(p); n != len(p) || err != nil {
			t.Fatalf("limited write: %d, %v", n, err)
		}
	}
	if over := len(data) > limit; b.over != over || !over && !bytes.Equal(b.Bytes(), data) || b.Len() > limit {
		t.Fatalf("%d bytes in chunks of %d, limit %d: over %v, kept %d bytes", len(data), chunk, limit, b.over, b.Len())
	}
}

// sameValue reports whether two JSON texts hold the same value, numbers as written.
func sameValue(a, b []byte) bool {
	decode := func(m []byte) (v any) {
		dec := json.NewDecoder(bytes.NewReader(m))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		return v
	}
	return reflect.DeepEqual(decode(a), decode(b))
}
