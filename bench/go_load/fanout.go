package main

// fan-out: one batching producer publishes -messages messages as fast as the client lets it, to a topic with
// -fanout Shared subscriptions, one consumer each (a goroutine doing Receive + Ack, as the Python client's row
// does with a thread); the rate is deliveries per second, from the first send until every consumer has taken
// every message. The Python client's own row is bound by its GIL on this machine (docs/benchmarks.md); this one
// measures the brokers with a client that is not.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

type fanOutReport struct {
	Subscriptions int     `json:"subscriptions"`
	Messages      int     `json:"messages"`   // published
	Deliveries    int64   `json:"deliveries"` // received and acknowledged, all subscriptions
	Seconds       float64 `json:"seconds"`    // first send -> last delivery
	Rate          float64 `json:"rate"`       // deliveries per second
	Error         string  `json:"error,omitempty"`
}

func fanOut(client pulsar.Client, topic string, subscriptions, messages, size int) (rep fanOutReport) {
	rep.Subscriptions, rep.Messages = subscriptions, messages
	fail := func(format string, args ...any) fanOutReport {
		rep.Error = fmt.Sprintf(format, args...)
		return rep
	}
	consumers := make([]pulsar.Consumer, 0, subscriptions)
	defer func() {
		for _, c := range consumers {
			c.Close()
		}
	}()
	for i := 0; i < subscriptions; i++ {
		c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: fmt.Sprintf("sub-%d", i),
			Type: pulsar.Shared})
		if err != nil {
			return fail("subscribe: %v", err)
		}
		consumers = append(consumers, c)
	}
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic,
		BatchingMaxPublishDelay: time.Millisecond, MaxPendingMessages: 1000, SendTimeout: 60 * time.Second})
	if err != nil {
		return fail("producer: %v", err)
	}
	defer producer.Close()

	var deliveries, sendErrors atomic.Int64
	var consumersDone sync.WaitGroup
	start := time.Now()
	for _, c := range consumers {
		consumersDone.Add(1)
		go func(c pulsar.Consumer) {
			defer consumersDone.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for k := 0; k < messages; k++ {
				msg, err := c.Receive(ctx)
				if err != nil {
					return // (counted as missing below)
				}
				c.Ack(msg)
				deliveries.Add(1)
			}
		}(c)
	}
	payload := make([]byte, size)
	for k := 0; k < messages; k++ {
		producer.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payload},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					sendErrors.Add(1)
				}
			})
	}
	if err := producer.Flush(); err != nil {
		return fail("flush: %v", err)
	}
	consumersDone.Wait()
	rep.Seconds = time.Since(start).Seconds()
	rep.Deliveries = deliveries.Load()
	if rep.Seconds > 0 {
		rep.Rate = float64(rep.Deliveries) / rep.Seconds
	}
	if n := sendErrors.Load(); n > 0 {
		return fail("%d sends failed", n)
	}
	if missing := int64(messages*subscriptions) - rep.Deliveries; missing > 0 {
		return fail("%d of %d deliveries never came (receive timed out after 60 s)", missing, messages*subscriptions)
	}
	return rep
}
