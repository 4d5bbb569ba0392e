package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"testing"
)

// TestJSONErrors: with --json, whatever the command, an error comes as {"error": "..."} on
// stderr, and the exit status is 1.
func TestJSONErrors(t *testing.T) {
	for _, args := range [][]string{
		{"get", "echo", "--json", "--endpoint", "http://127.0.0.1:1"},
		{"new", "lambda", "x", "--dir", t.TempDir(), "--json"},
		{"dev", "--json"}, // no --handlers
		{"create", "--json"},
		{"schedule", "--file", "/nonexistent.jsonl", "--json"},
	} {
		cmd := exec.Command(atfBin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var out struct {
			Error string `json:"error"`
		}
		if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 1 || json.Unmarshal(stderr.Bytes(), &out) != nil || out.Error == "" {
			t.Errorf("atf %v: %v, stderr %s", args, err, stderr.String())
		}
	}
}
