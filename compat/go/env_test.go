// Go client compatibility tests: run by `make compat` (compat/run.py), which starts the brokers and
// passes PULSAR_URL / PULSAR_HTTP / PULSAR_TLS_URL / PULSAR_HTTPS / PULSAR_TOKEN / PULSAR_CA.
// Each Test_<id> is the scenario <id> of compat/scenarios.py.
package compat

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"
)

func need(t *testing.T, name string) string {
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run the suite with `make compat`", name)
	}
	return v
}

func unique(prefix string) string {
	return fmt.Sprintf("%s-%08x", prefix, rand.Uint32())
}

func topicName(prefix string) string {
	return "persistent://public/default/" + unique(prefix)
}

func quietLogger() plog.Logger {
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	return plog.NewLoggerWithLogrus(l)
}

func newClient(t *testing.T) pulsar.Client {
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: need(t, "PULSAR_URL"), OperationTimeout: 15 * time.Second,
		Logger: quietLogger()})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustProducer(t *testing.T, c pulsar.Client, opts pulsar.ProducerOptions) pulsar.Producer {
	p, err := c.CreateProducer(opts)
	if err != nil {
		t.Fatalf("producer on %s: %v", opts.Topic, err)
	}
	t.Cleanup(p.Close)
	return p
}

func mustSubscribe(t *testing.T, c pulsar.Client, opts pulsar.ConsumerOptions) pulsar.Consumer {
	if opts.SubscriptionInitialPosition == pulsar.SubscriptionPositionLatest {
		opts.SubscriptionInitialPosition = pulsar.SubscriptionPositionEarliest
	}
	cons, err := c.Subscribe(opts)
	if err != nil {
		t.Fatalf("subscribe %s: %v", opts.Topic, err)
	}
	t.Cleanup(cons.Close)
	return cons
}

func send(t *testing.T, p pulsar.Producer, msg *pulsar.ProducerMessage) pulsar.MessageID {
	id, err := p.Send(ctxT(t, 15*time.Second), msg)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	return id
}

func sendN(t *testing.T, p pulsar.Producer, prefix string, n int) []pulsar.MessageID {
	ids := make([]pulsar.MessageID, 0, n)
	for i := 0; i < n; i++ {
		ids = append(ids, send(t, p, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("%s%d", prefix, i))}))
	}
	return ids
}

// receive returns the next message or fails after d.
func receive(t *testing.T, c pulsar.Consumer, d time.Duration) pulsar.Message {
	m, err := c.Receive(ctxT(t, d))
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return m
}

// receiveN receives and acks exactly n messages, returning their payloads.
func receiveN(t *testing.T, c pulsar.Consumer, n int) []string {
	out := make([]string, 0, n)
	for len(out) < n {
		m, err := c.Receive(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatalf("received %d of %d: %v (%v)", len(out), n, err, out)
		}
		out = append(out, string(m.Payload()))
		_ = c.Ack(m)
	}
	return out
}

// none asserts that nothing arrives within d.
func none(t *testing.T, c pulsar.Consumer, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if m, err := c.Receive(ctx); err == nil {
		t.Fatalf("unexpected message %q", m.Payload())
	}
}

func expected(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func equal(t *testing.T, want, got []string) {
	t.Helper()
	if fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("want %v, got %v", want, got)
	}
}

// getJSON reads an admin REST document from the plain broker.
func getJSON(t *testing.T, path string, out any) int {
	resp, err := http.Get(need(t, "PULSAR_HTTP") + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 && out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, body)
		}
	}
	return resp.StatusCode
}

func putJSON(t *testing.T, path string, body string) {
	req, _ := http.NewRequest(http.MethodPut, need(t, "PULSAR_HTTP")+path, nil)
	if body != "" {
		req, _ = http.NewRequest(http.MethodPut, need(t, "PULSAR_HTTP")+path, stringReader(body))
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("PUT %s: %d %s", path, resp.StatusCode, b)
	}
}

func postJSON(t *testing.T, path string, body string) {
	req, _ := http.NewRequest(http.MethodPost, need(t, "PULSAR_HTTP")+path, stringReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
	}
}
