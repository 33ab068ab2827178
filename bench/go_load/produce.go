package main

// produce: -messages messages published as fast as the official Go client goes (batched or not), with at most
// -pending in flight; the rate is messages per second from the first send to the last receipt. The Python
// client's produce rows spend about as much CPU per message in the client as the fastest brokers do in the
// broker (docs/benchmarks.md), so these rows show the brokers with a client that costs less.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

type produceReport struct {
	Messages int     `json:"messages"` // receipted
	Batched  bool    `json:"batched"`
	Seconds  float64 `json:"seconds"` // first send -> last receipt
	Rate     float64 `json:"rate"`    // messages per second
	Error    string  `json:"error,omitempty"`
}

func produce(client pulsar.Client, topic string, messages, size, pending int, batched bool) (rep produceReport) {
	rep.Batched = batched
	fail := func(format string, args ...any) produceReport {
		rep.Error = fmt.Sprintf(format, args...)
		return rep
	}
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: !batched,
		BatchingMaxPublishDelay: time.Millisecond, MaxPendingMessages: pending, SendTimeout: 60 * time.Second})
	if err != nil {
		return fail("producer: %v", err)
	}
	defer producer.Close()
	var receipts sync.WaitGroup
	var sendErrors, receipted atomic.Int64
	receipts.Add(messages)
	payload := make([]byte, size)
	start := time.Now()
	for k := 0; k < messages; k++ {
		producer.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payload},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					sendErrors.Add(1)
				} else {
					receipted.Add(1)
				}
				receipts.Done()
			})
	}
	if err := producer.Flush(); err != nil {
		return fail("flush: %v", err)
	}
	receipts.Wait()
	rep.Seconds = time.Since(start).Seconds()
	rep.Messages = int(receipted.Load())
	if rep.Seconds > 0 {
		rep.Rate = float64(rep.Messages) / rep.Seconds
	}
	if n := sendErrors.Load(); n > 0 {
		return fail("%d of %d sends failed", n, messages)
	}
	return rep
}
