package testsrv

import "flag"

// FuzzWorker reports whether the test binary runs as a worker of go test
// -fuzz, which runs the fuzz target and nothing else, so that a TestMain
// can skip the servers and builds its tests share. Call it from TestMain:
// it parses the command line.
func FuzzWorker() bool {
	flag.Parse()
	f := flag.Lookup("test.fuzzworker")
	return f != nil && f.Value.String() == "true"
}
