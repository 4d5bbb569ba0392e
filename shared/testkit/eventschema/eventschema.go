// Package eventschema validates lifecycle events, as a bus's rule target receives them, against
// the JSON Schemas of events/schemas (one per detail-type), for tests.
package eventschema

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Schemas are the compiled schemas of a folder, by detail-type.
type Schemas map[string]*jsonschema.Schema

// Load compiles every schema of dir (<detail-type>.json), asserting formats such as date-time.
func Load(dir string) (Schemas, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("eventschema: no schema in %s", dir)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	out := Schemas{}
	for _, f := range files {
		s, err := c.Compile(f)
		if err != nil {
			return nil, err
		}
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = s
	}
	return out, nil
}

// Validate checks one event (the JSON a target receives) against the schema of its detail-type,
// and returns that detail-type.
func (s Schemas) Validate(event []byte) (string, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(event))
	if err != nil {
		return "", fmt.Errorf("eventschema: %w", err)
	}
	m, _ := v.(map[string]any)
	dt, _ := m["detail-type"].(string)
	schema := s[dt]
	if schema == nil {
		return dt, fmt.Errorf("eventschema: no schema for detail-type %q", dt)
	}
	if err := schema.Validate(v); err != nil {
		return dt, fmt.Errorf("eventschema: %s: %w", dt, err)
	}
	return dt, nil
}

// Dir is events/schemas, found from the working directory up (a test runs in its package's
// folder).
func Dir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "events", "schemas")
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("eventschema: no go.mod above the working directory")
		}
		dir = parent
	}
}
