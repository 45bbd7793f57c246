package ras

import (
	"bufio"
	"context"
	"errors"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncclwatch/watchdog/snapshot"
)

// rasServer is a real TCP server on 127.0.0.1 that speaks the RAS client protocol the way
// client_support.cc does and replays captured reports.
type rasServer struct {
	t        *testing.T
	ln       net.Listener
	jsonRep  []byte
	textRep  []byte
	old      bool   // a server before 2.28.7: SET FORMAT is an unknown command
	hang     bool   // never answers STATUS
	cutAfter int    // > 0: close after this many report bytes
	greeting string // "" means "SERVER PROTOCOL 2"

	mu   sync.Mutex
	cmds []string
	wg   sync.WaitGroup
	done chan struct{}
}

func startServer(t *testing.T, s *rasServer) *rasServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.t, s.ln, s.done = t, ln, make(chan struct{})
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(func() {
		close(s.done)
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *rasServer) addr() string { return s.ln.Addr().String() }

func (s *rasServer) commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.cmds...)
}

func (s *rasServer) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer conn.Close()
			// Unblock a hanging handler when the test ends.
			go func() { <-s.done; conn.Close() }()
			s.serve(conn)
		}()
	}
}

func (s *rasServer) serve(conn net.Conn) {
	br := bufio.NewReader(conn)
	format := "text"
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		cmd := strings.TrimRight(line, "\r\n")
		s.mu.Lock()
		s.cmds = append(s.cmds, cmd)
		s.mu.Unlock()
		upper := strings.ToUpper(cmd)
		switch {
		case strings.HasPrefix(upper, "CLIENT PROTOCOL "):
			g := s.greeting
			if g == "" {
				g = "SERVER PROTOCOL 2"
			}
			conn.Write([]byte(g + "\n"))
		case strings.HasPrefix(upper, "TIMEOUT "):
			conn.Write([]byte("OK\n"))
		case strings.HasPrefix(upper, "SET FORMAT ") && !s.old:
			format = strings.ToLower(strings.TrimPrefix(upper, "SET FORMAT "))
			conn.Write([]byte("OK\n"))
		case upper == "STATUS":
			if s.hang {
				<-s.done
				return
			}
			rep := s.textRep
			if format == "json" {
				rep = s.jsonRep
			}
			if s.cutAfter > 0 && s.cutAfter < len(rep) {
				rep = rep[:s.cutAfter]
			}
			// NCCL streams the report in chunks, then closes.
			for len(rep) > 0 {
				n := min(len(rep), 512)
				if _, err := conn.Write(rep[:n]); err != nil {
					return
				}
				rep = rep[n:]
			}
			return
		default:
			conn.Write([]byte("ERROR: Unknown command " + cmd + "\n"))
		}
	}
}

func hangCase(t *testing.T) (jsonRep, textRep []byte) {
	dir := filepath.Join(capturesDir, "multicomm_silent")
	return loadCapture(t, filepath.Join(dir, "ras.hang6s.json.txt")), loadCapture(t, filepath.Join(dir, "ras.hang6s.text.txt"))
}

func fixedNow() time.Time { return time.Date(2026, 11, 21, 23, 0, 51, 0, time.UTC) }

func TestClientJSON(t *testing.T) {
	j, x := hangCase(t)
	srv := startServer(t, &rasServer{jsonRep: j, textRep: x})
	c := &Client{Addr: srv.addr(), Timeout: 5 * time.Second, ServerTimeout: 3 * time.Second, Now: fixedNow}
	got, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ParseJSONKeep(j, nil)
	want.T = snapshot.MicrosOf(fixedNow())
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	wantCmds := []string{"CLIENT PROTOCOL 2", "TIMEOUT 3", "SET FORMAT json", "STATUS"}
	if cmds := srv.commands(); !reflect.DeepEqual(cmds, wantCmds) {
		t.Errorf("commands %q, want %q", cmds, wantCmds)
	}
}

func TestClientOldServerFallsBackToText(t *testing.T) {
	j, x := hangCase(t)
	srv := startServer(t, &rasServer{jsonRep: j, textRep: x, old: true})
	got, err := (&Client{Addr: srv.addr(), Timeout: 5 * time.Second}).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.Format != "text" || len(got.Comms) != 3 || got.T == 0 {
		t.Errorf("fallback report: %+v", got)
	}
	if cmds := srv.commands(); len(cmds) != 3 || cmds[1] != "SET FORMAT json" || cmds[2] != "STATUS" {
		t.Errorf("commands %q", cmds)
	}
}

func TestClientTextOption(t *testing.T) {
	j, x := hangCase(t)
	srv := startServer(t, &rasServer{jsonRep: j, textRep: x})
	got, err := (&Client{Addr: srv.addr(), Text: true}).Status(context.Background())
	if err != nil || got.Format != "text" {
		t.Fatalf("%v %+v", err, got)
	}
}

func TestClientErrors(t *testing.T) {
	j, x := hangCase(t)

	// A port nothing listens on: listen, note the port, close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := ln.Addr().String()
	ln.Close()

	for _, tc := range []struct {
		name    string
		addr    func(t *testing.T) string
		want    error
		wantMsg string
	}{
		{"nothing listening", func(*testing.T) string { return closedAddr }, ErrNotListening, "connection refused"},
		{"hangs", func(t *testing.T) string {
			return startServer(t, &rasServer{jsonRep: j, textRep: x, hang: true}).addr()
		}, ErrTimeout, ""},
		{"closes mid-reply", func(t *testing.T) string {
			return startServer(t, &rasServer{jsonRep: j, textRep: x, cutAfter: len(j) / 2}).addr()
		}, ErrProtocol, "unexpected end of JSON input"},
		{"closes mid-reply (text, old server)", func(t *testing.T) string {
			return startServer(t, &rasServer{jsonRep: j, textRep: x, old: true, cutAfter: 300}).addr()
		}, ErrProtocol, "truncated"},
		{"not RAS", func(t *testing.T) string {
			return startServer(t, &rasServer{greeting: "HTTP/1.1 400 Bad Request"}).addr()
		}, ErrProtocol, `greeting "HTTP/1.1 400 Bad Request"`},
		{"closes at once", func(t *testing.T) string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			return l.Addr().String()
		}, ErrProtocol, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Client{Addr: tc.addr(t), Timeout: 300 * time.Millisecond}
			start := time.Now()
			rep, err := c.Status(context.Background())
			if rep != nil || !errors.Is(err, tc.want) {
				t.Fatalf("Status = %+v, %v; want error %v", rep, err, tc.want)
			}
			for _, other := range []error{ErrNotListening, ErrProtocol, ErrTimeout} {
				if other != tc.want && errors.Is(err, other) {
					t.Errorf("error %v also matches %v", err, other)
				}
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q lacks %q", err, tc.wantMsg)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("took %v with a 300ms timeout", d)
			}
		})
	}
}

func TestClientCancel(t *testing.T) {
	srv := startServer(t, &rasServer{hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := (&Client{Addr: srv.addr(), Timeout: time.Minute}).Status(ctx)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestClientReplyCap(t *testing.T) {
	big := append([]byte("{\"nccl_version\": \"x\", \"pad\": \""), make([]byte, MaxReply)...)
	for i := 30; i < len(big); i++ {
		big[i] = 'a'
	}
	srv := startServer(t, &rasServer{jsonRep: big})
	_, err := (&Client{Addr: srv.addr()}).Status(context.Background())
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err = %v", err)
	}
}
