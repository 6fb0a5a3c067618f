package natstest

import (
	"net"
	"testing"
)

// FreePorts returns n distinct free TCP ports on 127.0.0.1 (free when
// returned: the listeners that found them are closed).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var out []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}
