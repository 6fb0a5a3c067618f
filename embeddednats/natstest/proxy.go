package natstest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// routeNet is the set of proxies in front of the nodes' cluster ports.
// Each proxied connection learns its source node from the route CONNECT
// line (which carries the dialing server's ID), so a node can be cut off in
// both directions.
type routeNet struct {
	mu        sync.Mutex
	isolated  map[int]bool
	delays    map[[2]int]time.Duration // bytes from node [0] to node [1]
	conns     map[*pconn]struct{}
	listeners []net.Listener
	idToNode  func(id string) int
}

type pconn struct {
	src, dst     int // node indexes; src -1 until known
	client, back net.Conn
}

func (c *pconn) close() {
	c.client.Close()
	c.back.Close()
}

func newRouteNet() *routeNet {
	return &routeNet{isolated: map[int]bool{}, delays: map[[2]int]time.Duration{}, conns: map[*pconn]struct{}{}}
}

// listen starts a proxy for node dst forwarding to target and returns its
// address.
func (r *routeNet) listen(t testing.TB, dst int, target string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	r.listeners = append(r.listeners, ln)
	r.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.serve(c, dst, target)
		}
	}()
	return ln.Addr().String(), nil
}

func (r *routeNet) serve(client net.Conn, dst int, target string) {
	r.mu.Lock()
	cut := r.isolated[dst]
	r.mu.Unlock()
	if cut {
		client.Close()
		return
	}
	back, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		client.Close()
		return
	}
	pc := &pconn{src: -1, dst: dst, client: client, back: back}
	r.mu.Lock()
	r.conns[pc] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.conns, pc)
		r.mu.Unlock()
		pc.close()
	}()
	go func() {
		// back -> client carries dst's bytes to the dialing node.
		r.copyDelayed(client, back, func() (int, int) { return dst, r.srcOf(pc) })
		pc.close()
	}()
	br := bufio.NewReader(client)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if _, werr := back.Write(line); werr != nil {
				return
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return
		}
		if bytes.HasPrefix(line, []byte("CONNECT ")) {
			var ci struct {
				Name string `json:"name"`
			}
			_ = json.Unmarshal(bytes.TrimSpace(line[len("CONNECT "):]), &ci)
			r.mu.Lock()
			if r.idToNode != nil {
				pc.src = r.idToNode(ci.Name)
			}
			cut := r.isolated[pc.src] || r.isolated[dst]
			r.mu.Unlock()
			if cut {
				return
			}
			break
		}
	}
	r.copyDelayed(back, br, func() (int, int) { return pc.src, dst })
}

func (r *routeNet) srcOf(pc *pconn) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return pc.src
}

// delay sets how long bytes from node from take to reach node to (0: no
// delay). Order on a connection is kept: a later chunk is never written
// before an earlier one.
func (r *routeNet) delay(from, to int, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delays[[2]int{from, to}] = d
}

// copyDelayed copies src to dst, holding each chunk for the delay of the
// link dir names at the time the chunk was read. A chunk with no delay
// is written at once when nothing is queued before it.
func (r *routeNet) copyDelayed(dst io.Writer, src io.Reader, dir func() (from, to int)) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	ch := make(chan chunk, 4096)
	var queued atomic.Int64 // chunks enqueued and not yet written
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range ch {
			if w := time.Until(c.due); w > 0 {
				time.Sleep(w)
			}
			_, err := dst.Write(c.b)
			queued.Add(-1)
			if err != nil {
				for range ch { // drain so the reader never blocks
					queued.Add(-1)
				}
				return
			}
		}
	}()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			from, to := dir()
			r.mu.Lock()
			d := r.delays[[2]int{from, to}]
			r.mu.Unlock()
			if d == 0 && queued.Load() == 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			} else {
				queued.Add(1)
				ch <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(d)}
			}
		}
		if err != nil {
			break
		}
	}
	close(ch)
	<-done
}

func (r *routeNet) isolate(i int, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.isolated[i] = on
	if !on {
		return
	}
	for pc := range r.conns {
		if pc.src == i || pc.dst == i {
			pc.close()
		}
	}
}

func (r *routeNet) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.listeners {
		l.Close()
	}
	for pc := range r.conns {
		pc.close()
	}
}
