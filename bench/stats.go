package main

import (
	"math"
	"slices"
	"time"
)

// Latency summarises delivery latencies in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// Percentile is the nearest-rank percentile p (0 < p ≤ 100) of sorted values: the smallest value
// with at least p% of the values at or below it. Zero for no values.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Summarise returns the percentiles of ds.
func Summarise(ds []time.Duration) Latency {
	ms := make([]float64, len(ds))
	for i, d := range ds {
		ms[i] = float64(d) / float64(time.Millisecond)
	}
	slices.Sort(ms)
	return Latency{
		Count: len(ms), P50: Percentile(ms, 50), P95: Percentile(ms, 95), P99: Percentile(ms, 99),
		Max: Percentile(ms, 100),
	}
}
