// A load client that speaks to a Forq API the way Forq's own harness does (h2c or HTTP/1.1).
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

var (
	api     = flag.String("api", "http://127.0.0.1:8080", "forqapp API base URL")
	auth    = flag.String("auth", "", "FORQ_AUTH_SECRET")
	cons    = flag.Int("c", 10, "consumers")
	prods   = flag.Int("p", 10, "producers")
	dur     = flag.Duration("duration", 8*time.Second, "measurement time")
	size    = flag.Int("size", 100, "message size in bytes (content; the issue's harness: 100)")
	backlog = flag.Int("backlog", 1000, "messages produced before the run")
	useH2   = flag.Bool("http2", false, "h2c (HTTP/2 cleartext, one connection) instead of HTTP/1.1")
	idle    = flag.Int("idle", 0, "long polls held open on an empty queue meanwhile (idle consumers)")
	wake    = flag.Bool("wake", false, "also measure wake-ups: a poll waits on an empty queue, a produce wakes it")
	queue   = "benchmark_queue"
	client  *http.Client

	produced, consumed, empty, perr, cerr, aerr, dups atomic.Int64

	seen  sync.Map // message ids delivered: a second delivery is a duplicate
	errMu sync.Mutex
	errs  []string
	latMu sync.Mutex
	lat   = map[string][]time.Duration{}
)

func logErr(s string) {
	errMu.Lock()
	if len(errs) < 10 {
		errs = append(errs, s)
	}
	errMu.Unlock()
}

// failed counts and logs an error of one operation, then backs off a little.
func failed(counter *atomic.Int64, op string, err error) {
	counter.Add(1)
	logErr(op + ": " + err.Error())
	time.Sleep(10 * time.Millisecond)
}

func rec(k string, d time.Duration) { latMu.Lock(); lat[k] = append(lat[k], d); latMu.Unlock() }

func content(sent int64) string {
	b, _ := json.Marshal(map[string]any{"sentAtMs": sent, "pad": ""})
	pad := *size - len(b)
	if pad < 0 {
		pad = 0
	}
	b, _ = json.Marshal(map[string]any{"sentAtMs": sent, "pad": strings.Repeat("x", pad)})
	return string(b)
}

// expect204 sends req (with the API key) and reads the whole answer, which must be 204.
func expect204(what string, req *http.Request) error {
	req.Header.Set("X-API-Key", *auth)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 204 {
		return fmt.Errorf("%s returned %d", what, resp.StatusCode)
	}
	return nil
}

func produce(sent int64) error { return produceTo(queue, sent) }

func produceTo(queue string, sent int64) error {
	body, _ := json.Marshal(map[string]string{"content": content(sent)})
	req, _ := http.NewRequest("POST", *api+"/api/v1/queues/"+queue+"/messages", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	return expect204("produce", req)
}

type msg struct{ ID, Content, Receipt string }

func consume(ctx context.Context) (*msg, error) { return consumeFrom(ctx, queue) }

func consumeFrom(ctx context.Context, queue string) (*msg, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", *api+"/api/v1/queues/"+queue+"/messages", nil)
	req.Header.Set("X-API-Key", *auth)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
	switch resp.StatusCode {
	case 204:
		return nil, nil
	case 200:
		var m msg
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			return nil, err
		}
		return &m, nil
	}
	return nil, fmt.Errorf("consume returned %d", resp.StatusCode)
}

func ack(id, receipt string) error {
	req, _ := http.NewRequest("POST", *api+"/api/v1/queues/"+queue+"/messages/"+id+"/ack", nil)
	req.Header.Set("X-Forq-Receipt", receipt)
	return expect204("ack", req)
}

func pct(k string, p float64) float64 {
	s := lat[k]
	if len(s) == 0 {
		return 0
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[int(float64(len(s)-1)*p)].Microseconds()) / 1000
}

func main() {
	flag.Parse()
	var tr http.RoundTripper = &http.Transport{MaxIdleConns: 200, MaxIdleConnsPerHost: 200, IdleConnTimeout: 90 * time.Second}
	if *useH2 {
		tr = &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, n, a string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, n, a)
		}}
	}
	client = &http.Client{Timeout: 40 * time.Second, Transport: tr}
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < *backlog/10; j++ {
				if err := produce(0); err != nil {
					fmt.Println("seed:", err)
					os.Exit(1)
				}
			}
		}()
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	var idleWg sync.WaitGroup
	idleCtx, idleCancel := context.WithCancel(context.Background())
	var idleGot atomic.Int64
	for i := 0; i < *idle; i++ { // each on its own connection (HTTP/1.1), waiting on a queue nobody feeds
		idleWg.Add(1)
		go func() {
			defer idleWg.Done()
			for idleCtx.Err() == nil {
				if m, err := consumeFrom(idleCtx, "idle_queue"); err == nil && m != nil {
					idleGot.Add(1)
				} else if err != nil && idleCtx.Err() == nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	if *idle > 0 {
		time.Sleep(time.Second) // every poll is waiting before the measurement starts
	}
	if *wake {
		wg.Add(1)
		go func() { // one poll at a time on an empty queue; 50 ms after it started, one produce wakes it
			defer wg.Done()
			wakeQueue := fmt.Sprintf("wake_%d", time.Now().UnixNano()) // empty: no earlier run's leftovers
			for ctx.Err() == nil {
				got := make(chan time.Time, 1)
				go func() {
					if m, err := consumeFrom(ctx, wakeQueue); err == nil && m != nil {
						got <- time.Now()
						req, _ := http.NewRequest("POST", *api+"/api/v1/queues/"+wakeQueue+"/messages/"+m.ID+"/ack", nil)
						req.Header.Set("X-Forq-Receipt", m.Receipt)
						expect204("ack", req)
					}
					close(got)
				}()
				time.Sleep(50 * time.Millisecond)
				t := time.Now()
				if err := produceTo(wakeQueue, 0); err != nil {
					continue
				}
				if at, ok := <-got; ok {
					rec("wake", at.Sub(t))
				}
			}
		}()
	}
	start := time.Now()
	for i := 0; i < *cons; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t := time.Now()
				m, err := consume(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					failed(&cerr, "consume", err)
					continue
				}
				if m == nil {
					empty.Add(1)
					continue
				}
				rec("consume", time.Since(t))
				if _, loaded := seen.LoadOrStore(m.ID, true); loaded {
					dups.Add(1)
				}
				var p struct{ SentAtMs int64 }
				if json.Unmarshal([]byte(m.Content), &p) == nil && p.SentAtMs > 0 {
					rec("e2e", time.Duration(time.Now().UnixMilli()-p.SentAtMs)*time.Millisecond)
				}
				t = time.Now()
				if err := ack(m.ID, m.Receipt); err != nil {
					aerr.Add(1)
					logErr("ack: " + err.Error())
				} else {
					rec("ack", time.Since(t))
					consumed.Add(1)
				}
			}
		}()
	}
	for i := 0; i < *prods; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t := time.Now()
				if err := produce(time.Now().UnixMilli()); err != nil {
					failed(&perr, "produce", err)
					continue
				}
				rec("produce", time.Since(t))
				produced.Add(1)
			}
		}()
	}
	wg.Wait()
	w := time.Since(start).Seconds()
	idleCancel()
	idleWg.Wait()
	proto := "HTTP/1.1"
	if *useH2 {
		proto = "h2c"
	}
	fmt.Printf("%s %dc%dp %.0fs: produced %.0f/s consumed %.0f/s | errors produce %d consume %d ack %d | duplicates %d | empty polls %d\n",
		proto, *cons, *prods, w, float64(produced.Load())/w, float64(consumed.Load())/w, perr.Load(), cerr.Load(), aerr.Load(), dups.Load(), empty.Load())
	if *idle > 0 {
		fmt.Printf("  %d idle long polls held open meanwhile (%d got a message)\n", *idle, idleGot.Load())
	}
	for _, k := range []string{"produce", "consume", "ack", "e2e", "wake"} {
		if len(lat[k]) == 0 && (k == "wake" || k == "e2e") {
			continue
		}
		fmt.Printf("  %-8s p50 %7.2f ms  p99 %7.2f ms  (n=%d)\n", k, pct(k, .5), pct(k, .99), len(lat[k]))
	}
	for _, e := range errs {
		fmt.Println("  error:", e)
	}
}
