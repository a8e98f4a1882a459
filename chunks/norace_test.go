//go:build !race

package chunks

const raceEnabled = false
