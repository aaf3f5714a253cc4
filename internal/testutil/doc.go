// Package testutil holds what the tests of every package share: the
// goroutine-leak check (Goroutines, NoLeaks) and the scaling of the timeouts
// that bound a hang (Scale) for builds with the race detector, which run
// several times slower; the waits on a state reached elsewhere (WaitFor, on
// one polling loop, Poll) and on a call that has parked (WaitBlocked); and
// WritePKI, the certificates of TLS tests.
//
// No test asserts a wall-clock threshold through this package: a timeout
// here only turns a hang into a failure that says what was awaited.
//
// Concurrency: the functions are safe for concurrent use; a Goroutines
// snapshot is read-only once taken.
package testutil
