//go:build race

package modeltest

func init() {
	// The race detector slows the pure-Go SQLite down some thirty times: -race runs fewer
	// checks by default. The model drives the components from one goroutine anyway.
	raceDetector = true
}
