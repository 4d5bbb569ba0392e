package main

import (
	"errors"
	"flag"
	"os"
	"runtime"
	"runtime/pprof"
)

// profiles are the pprof files a run writes, if asked: where the time goes (docs/benchmarks.md).
type profiles struct {
	cpu, block, mutex *string
}

func profileFlags() profiles {
	return profiles{
		cpu:   flag.String("cpuprofile", "", "write a CPU profile of the run to this file"),
		block: flag.String("blockprofile", "", "write a profile of where goroutines blocked (channels, locks, selects) to this file"),
		mutex: flag.String("mutexprofile", "", "write a profile of contended mutexes to this file"),
	}
}

// start starts the profiles asked for and returns what writes them out at the end of the run.
func (p profiles) start() (stop func(), err error) {
	var cpu *os.File
	if *p.cpu != "" {
		if cpu, err = os.Create(*p.cpu); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			cpu.Close()
			return nil, err
		}
	}
	if *p.block != "" {
		runtime.SetBlockProfileRate(10_000) // a sample per 10 µs blocked: cheap enough not to skew the run
	}
	if *p.mutex != "" {
		runtime.SetMutexProfileFraction(10)
	}
	return func() {
		if cpu != nil {
			pprof.StopCPUProfile()
			_ = cpu.Close() // a profile: best effort
		}
		for name, path := range map[string]string{"block": *p.block, "mutex": *p.mutex} {
			if path != "" {
				_ = writeProfile(name, path) // a profile: best effort
			}
		}
	}, nil
}

func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup(name).WriteTo(f, 0), f.Close())
}
