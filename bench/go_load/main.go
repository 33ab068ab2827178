// latency-load: publish at a fixed rate with the official Go client and measure each message's latency.
//
// Open loop: message i is due at start + i/rate, whatever happened to the messages before it, so a slow
// broker does not slow the offered load down (a closed loop would hide its latency). Messages are sent
// unbatched; the publish latency is taken from the SendAsync call to its receipt callback, the end-to-end
// latency from the same moment to the consumer's receipt (the send time rides in the payload; the consumer
// is in this process, so both read one monotonic clock). The lag is how late each send started against
// its due time (this process's own scheduling): with the publish latency it gives the latency from the
// schedule, which a stalled sender cannot hide (coordinated omission).
//
// The rate achieved is the lower of the rate sent (measured messages over the time from the first to the
// last send) and the rate receipted (over the time from the first send to the last receipt): a sender that
// falls behind its schedule and a broker that falls behind the sender both show.
//
// Prints one JSON object on stdout. Exit status 0 when every message was sent, receipted and received and
// the rate achieved is at least -min-ratio of the rate offered; 3 when it is not (the JSON says by how
// much); 1 on any other failure (errors, timeouts).
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"
)

type percentiles struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

type report struct {
	Offered      float64     `json:"offered"`          // msg/s asked
	Achieved     float64     `json:"achieved"`         // the lower of the two rates below
	SendRate     float64     `json:"send_rate"`        // msg/s sent in the measured window
	ReceiptRate  float64     `json:"receipt_rate"`     // msg/s receipted, from the first send to the last receipt
	Messages     int         `json:"messages"`         // measured (the warm-up's are not)
	Seconds      float64     `json:"seconds"`          // from the first measured send to the last
	Publish      percentiles `json:"publish_ms"`       // SendAsync -> receipt
	FromSchedule percentiles `json:"from_schedule_ms"` // due time -> receipt
	EndToEnd     percentiles `json:"end_to_end_ms"`    // SendAsync -> received by the consumer
	Lag          percentiles `json:"lag_ms"`           // due time -> SendAsync
	SendErrors   int64       `json:"send_errors"`
	Received     int         `json:"received"`
	Error        string      `json:"error,omitempty"`
}

func quantiles(xs []int64) percentiles {
	if len(xs) == 0 {
		return percentiles{}
	}
	s := append([]int64(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) float64 { // nearest rank
		k := int(q*float64(len(s))+0.999999) - 1
		if k < 0 {
			k = 0
		}
		if k >= len(s) {
			k = len(s) - 1
		}
		return float64(s[k]) / 1e6
	}
	return percentiles{P50: at(0.50), P99: at(0.99), P999: at(0.999), Max: float64(s[len(s)-1]) / 1e6}
}

func main() {
	url := flag.String("url", "pulsar://127.0.0.1:6650", "service URL")
	topic := flag.String("topic", "", "topic (required)")
	rate := flag.Float64("rate", 10000, "messages per second offered")
	seconds := flag.Float64("seconds", 10, "measured seconds")
	warmup := flag.Float64("warmup", 1, "seconds at the same rate before the measured ones (not measured)")
	size := flag.Int("size", 100, "payload bytes (at least 9)")
	minRatio := flag.Float64("min-ratio", 0.95, "fail (exit 3) when the rate achieved is below this share of -rate")
	endToEnd := flag.Bool("e2e", true, "wait for the consumer to receive every message and measure end-to-end "+
		"latency (false: the consumer still takes and acknowledges what it receives, nothing waits for it)")
	fanOutTo := flag.Int("fanout", 0, "instead: fan-out throughput to this many Shared subscriptions (fanout.go)")
	produceOnly := flag.Bool("produce", false, "instead: publish -messages as fast as the client goes (produce.go)")
	batched := flag.Bool("batched", true, "with -produce: batching on")
	pending := flag.Int("pending", 5000, "with -produce: messages in flight at most (per producer)")
	producers := flag.Int("producers", 1, "with -produce: producers at once, each on a topic of its own")
	messages := flag.Int("messages", 20000, "with -fanout or -produce: messages to publish")
	flag.Parse()
	if *fanOutTo > 0 || *produceOnly {
		if *topic == "" || *messages <= 0 || *pending <= 0 || *producers <= 0 {
			fmt.Fprintln(os.Stderr, "latency-load -fanout/-produce: -topic is required; -messages, -pending "+
				"and -producers must be positive")
			os.Exit(2)
		}
		client, err := newClient(*url)
		if err != nil {
			fmt.Printf("{\"error\": %q}\n", err.Error())
			os.Exit(1)
		}
		var rep any
		failed := false
		if *produceOnly {
			r := produce(client, *topic, *messages, *size, *pending, *batched, *producers)
			rep, failed = r, r.Error != ""
		} else {
			r := fanOut(client, *topic, *fanOutTo, *messages, *size)
			rep, failed = r, r.Error != ""
		}
		client.Close()
		out, _ := json.Marshal(rep)
		fmt.Println(string(out))
		if failed {
			os.Exit(1)
		}
		return
	}
	if *topic == "" || *rate <= 0 || *seconds <= 0 || *size < 9 {
		fmt.Fprintln(os.Stderr, "latency-load: -topic is required; -rate and -seconds must be positive, -size >= 9")
		os.Exit(2)
	}
	rep := run(*url, *topic, *rate, *seconds, *warmup, *size, *endToEnd)
	status := 0
	if rep.Error != "" {
		status = 1
	} else if rep.Achieved < *minRatio**rate {
		rep.Error = fmt.Sprintf("offered %.0f msg/s, achieved %.0f (sent %.0f, receipted %.0f): below %.0f%%",
			*rate, rep.Achieved, rep.SendRate, rep.ReceiptRate, *minRatio*100)
		status = 3
	}
	out, _ := json.Marshal(rep)
	fmt.Println(string(out))
	os.Exit(status)
}

func run(url, topic string, rate, seconds, warmup float64, size int, endToEnd bool) (rep report) {
	rep.Offered = rate
	fail := func(format string, args ...any) report {
		rep.Error = fmt.Sprintf(format, args...)
		return rep
	}
	client, err := newClient(url)
	if err != nil {
		return fail("client: %v", err)
	}
	defer client.Close()
	consumer, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "latency",
		Type: pulsar.Exclusive})
	if err != nil {
		return fail("subscribe: %v", err)
	}
	defer consumer.Close()
	warm := int(rate * warmup)
	n := int(rate * seconds)
	total := warm + n
	// Pending messages are never the limit: a full queue would block the sender, closing the loop.
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true,
		MaxPendingMessages: total + 1, SendTimeout: 60 * time.Second})
	if err != nil {
		return fail("producer: %v", err)
	}
	defer producer.Close()

	base := time.Now() // every timestamp below is time.Since(base): the monotonic clock
	publish := make([]int64, n)
	lag := make([]int64, n)
	receiptAt := make([]int64, n)
	var errors, answered atomic.Int64
	var receipts sync.WaitGroup
	receipts.Add(total)

	e2e := make([]int64, 0, n)
	received := make(chan struct{})
	var lastReceived atomic.Int64
	go func() { // the consumer: every message, warm-up included, then done
		defer close(received)
		for got := 0; got < total; got++ {
			msg, ok := <-consumer.Chan()
			if !ok {
				return
			}
			now := int64(time.Since(base))
			p := msg.Payload()
			if len(p) >= 9 && p[8] == 1 {
				e2e = append(e2e, now-int64(binary.BigEndian.Uint64(p)))
			}
			consumer.AckID(msg.ID())
			lastReceived.Store(int64(got + 1))
		}
	}()

	payload := func(i int, sent int64) []byte {
		b := make([]byte, size)
		binary.BigEndian.PutUint64(b, uint64(sent))
		if i >= warm {
			b[8] = 1
		}
		return b
	}
	ctx := context.Background()
	period := float64(time.Second) / rate
	start := time.Since(base)
	var firstSent, lastSent int64
	for i := 0; i < total; i++ {
		due := int64(start) + int64(float64(i)*period)
		if wait := due - int64(time.Since(base)); wait > 0 {
			time.Sleep(time.Duration(wait))
		}
		sent := int64(time.Since(base))
		k := i - warm
		if k == 0 {
			firstSent = sent
		}
		if k >= 0 {
			lag[k] = sent - due
			lastSent = sent
		}
		producer.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload(i, sent)},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					errors.Add(1)
				} else if k >= 0 {
					now := int64(time.Since(base))
					publish[k] = now - sent
					receiptAt[k] = now
				}
				answered.Add(1)
				receipts.Done()
			})
	}
	waited := make(chan struct{})
	go func() { receipts.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(90 * time.Second):
		return fail("receipts: %d of %d sends not answered 90 s after the last", int64(total)-answered.Load(), total)
	}
	if endToEnd {
		select {
		case <-received:
		case <-time.After(60 * time.Second):
			return fail("consumer: %d of %d messages received 60 s after the last receipt", lastReceived.Load(), total)
		}
	}
	rep.SendErrors = errors.Load()
	if rep.SendErrors > 0 {
		return fail("%d sends failed", rep.SendErrors)
	}
	rep.Messages = n
	if endToEnd {
		rep.Received = len(e2e)
		rep.EndToEnd = quantiles(e2e)
	}
	window := float64(lastSent-firstSent) / 1e9
	rep.Seconds = window
	if n > 1 && window > 0 {
		rep.SendRate = float64(n-1) / window
	}
	var lastReceipt int64
	fromSchedule := make([]int64, n)
	for k := 0; k < n; k++ {
		if receiptAt[k] > lastReceipt {
			lastReceipt = receiptAt[k]
		}
		fromSchedule[k] = lag[k] + publish[k]
	}
	if lastReceipt > firstSent {
		rep.ReceiptRate = float64(n) / (float64(lastReceipt-firstSent) / 1e9)
	}
	rep.Achieved = min(rep.SendRate, rep.ReceiptRate)
	rep.Publish = quantiles(publish)
	rep.FromSchedule = quantiles(fromSchedule)
	rep.Lag = quantiles(lag)
	return rep
}

func newClient(url string) (pulsar.Client, error) {
	logger := logrus.New()
	logger.SetLevel(logrus.WarnLevel)
	logger.SetOutput(os.Stderr)
	return pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 60 * time.Second,
		Logger: log.NewLoggerWithLogrus(logger)})
}
