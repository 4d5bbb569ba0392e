package main

import (
	"flag"
	"fmt"
	"io"
	"runtime/debug"
)

// versionInfo is what `atf version` prints: the version of atf's module (a release's, when
// built with go install MODULE@VERSION; "(devel)" when built from a checkout) and the revision
// of the checkout it was built from, if the build recorded one.
type versionInfo struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

func versionOf(info *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: "unknown"}
	if info == nil {
		return v
	}
	v.Version, v.Go = info.Main.Version, info.GoVersion
	if v.Version == "" {
		v.Version = "unknown"
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func (v versionInfo) String() string {
	s := "atf " + v.Version
	if v.Revision != "" {
		s += ", revision " + v.Revision
		if v.Time != "" {
			s += " of " + v.Time
		}
		if v.Modified {
			s += " with local changes"
		}
	}
	if v.Go != "" {
		s += ", built with " + v.Go
	}
	return s
}

func version(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("atf version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("version takes no arguments")
	}
	info, _ := debug.ReadBuildInfo()
	v := versionOf(info)
	if *asJSON {
		return printJSON(out, v)
	}
	_, err := fmt.Fprintln(out, v)
	return err
}
