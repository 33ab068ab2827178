package main

// produce: -messages messages published as fast as the official Go client goes (batched or not), with at most
// -pending in flight, by -producers producers at once (each on a topic of its own); the rate is messages per second
// from the first send to the last receipt. The Python client's produce rows spend about as much CPU per message in
// the client as the fastest brokers do in the broker (docs/benchmarks.md), so these rows show the brokers with a
// client that costs less; with several producers the clients want more than the machine's cores, so the broker
// that takes less CPU per message leaves them more and shows a higher rate.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

type produceReport struct {
	Messages  int     `json:"messages"` // receipted
	Batched   bool    `json:"batched"`
	Producers int     `json:"producers"`
	Seconds   float64 `json:"seconds"` // first send -> last receipt
	Rate      float64 `json:"rate"`    // messages per second
	Error     string  `json:"error,omitempty"`
}

// produce publishes messages over producers producers at once (each on a topic of its own, topic-<i> when there
// are several, messages/producers each, at most pending in flight each), all created before the clock starts.
func produce(client pulsar.Client, topic string, messages, size, pending int, batched bool,
	producers int) (rep produceReport) {
	rep.Batched, rep.Producers = batched, producers
	fail := func(format string, args ...any) produceReport {
		rep.Error = fmt.Sprintf(format, args...)
		return rep
	}
	list := make([]pulsar.Producer, 0, producers)
	defer func() {
		for _, p := range list {
			p.Close()
		}
	}()
	for i := 0; i < producers; i++ {
		name := topic
		if producers > 1 {
			name = fmt.Sprintf("%s-%d", topic, i)
		}
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: name, DisableBatching: !batched,
			BatchingMaxPublishDelay: time.Millisecond, MaxPendingMessages: pending, SendTimeout: 60 * time.Second})
		if err != nil {
			return fail("producer: %v", err)
		}
		list = append(list, p)
	}
	var receipts sync.WaitGroup
	var sendErrors, receipted atomic.Int64
	each := messages / producers
	receipts.Add(each * producers)
	payload := make([]byte, size)
	flushErrors := make(chan error, producers)
	start := time.Now()
	for _, p := range list {
		go func(p pulsar.Producer) {
			for k := 0; k < each; k++ {
				p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payload},
					func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
						if err != nil {
							sendErrors.Add(1)
						} else {
							receipted.Add(1)
						}
						receipts.Done()
					})
			}
			flushErrors <- p.Flush()
		}(p)
	}
	for range list {
		if err := <-flushErrors; err != nil {
			return fail("flush: %v", err)
		}
	}
	receipts.Wait()
	rep.Seconds = time.Since(start).Seconds()
	rep.Messages = int(receipted.Load())
	if rep.Seconds > 0 {
		rep.Rate = float64(rep.Messages) / rep.Seconds
	}
	if n := sendErrors.Load(); n > 0 {
		return fail("%d of %d sends failed", n, each*producers)
	}
	return rep
}
