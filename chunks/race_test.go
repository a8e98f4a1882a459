//go:build race

package chunks

// raceEnabled shortens the randomized tests under the race detector, which
// slows this byte-heavy checking twentyfold; they have no concurrency to
// check.
const raceEnabled = true
