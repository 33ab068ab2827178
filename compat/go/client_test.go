package compat

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

func Test_connect_lookup(t *testing.T) {
	c := newClient(t)
	tp := topicName("lookup")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Exclusive})
	sendN(t, p, "m", 5)
	equal(t, expected("m", 5), receiveN(t, cons, 5))
	parts, err := c.TopicPartitions(tp)
	if err != nil || len(parts) != 1 || parts[0] != tp {
		t.Fatalf("partitions: %v %v", parts, err)
	}
}

func Test_http_service_url(t *testing.T) {
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: need(t, "PULSAR_HTTP"), OperationTimeout: 15 * time.Second,
		Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tp := topicName("http")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp})
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s"})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("over-http")})
	equal(t, []string{"over-http"}, receiveN(t, cons, 1))
}

func Test_sub_exclusive(t *testing.T) {
	c := newClient(t)
	tp := topicName("excl")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Exclusive})
	if second, err := c.Subscribe(pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Exclusive}); err == nil {
		second.Close()
		t.Fatal("a second exclusive consumer was accepted")
	}
	sendN(t, p, "m", 10)
	equal(t, expected("m", 10), receiveN(t, cons, 10))
}

// drain receives from several consumers until n distinct payloads arrived; returns count per consumer.
func drain(t *testing.T, n int, d time.Duration, consumers ...pulsar.Consumer) (map[string]int, []int) {
	type got struct {
		i   int
		msg pulsar.Message
	}
	ch := make(chan got, 1024)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for i, c := range consumers {
		go func(i int, c pulsar.Consumer) {
			for {
				m, err := c.Receive(ctx)
				if err != nil {
					return
				}
				_ = c.Ack(m)
				ch <- got{i, m}
			}
		}(i, c)
	}
	seen := map[string]int{}
	per := make([]int, len(consumers))
	for len(seen) < n {
		select {
		case g := <-ch:
			seen[string(g.msg.Payload())] = g.i
			per[g.i]++
		case <-ctx.Done():
			t.Fatalf("received %d of %d (per consumer %v)", len(seen), n, per)
		}
	}
	return seen, per
}

func Test_sub_shared(t *testing.T) {
	c := newClient(t)
	tp := topicName("shared")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	c1 := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Shared, ReceiverQueueSize: 5})
	c2 := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Shared, ReceiverQueueSize: 5})
	sendN(t, p, "m", 40)
	_, per := drain(t, 40, 20*time.Second, c1, c2)
	if per[0] == 0 || per[1] == 0 {
		t.Fatalf("one consumer got nothing: %v", per)
	}
}

func Test_sub_failover(t *testing.T) {
	c := newClient(t)
	tp := topicName("failover")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	c1 := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Failover, Name: "a"})
	c2 := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Failover, Name: "b"})
	sendN(t, p, "m", 10)
	_, per := drain(t, 10, 20*time.Second, c1, c2)
	if per[0] != 0 && per[1] != 0 {
		t.Fatalf("both failover consumers got messages: %v", per)
	}
}

func Test_sub_key_shared(t *testing.T) {
	c := newClient(t)
	tp := topicName("keyshared")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	c1 := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.KeyShared})
	c2 := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.KeyShared})
	for i := 0; i < 40; i++ {
		send(t, p, &pulsar.ProducerMessage{Key: fmt.Sprintf("k%d", i%8), Payload: []byte(fmt.Sprintf("k%d/%d", i%8, i))})
	}
	seen, _ := drain(t, 40, 20*time.Second, c1, c2)
	owner := map[string]int{}
	for payload, who := range seen {
		key := strings.Split(payload, "/")[0]
		if prev, ok := owner[key]; ok && prev != who {
			t.Fatalf("key %s went to two consumers", key)
		}
		owner[key] = who
	}
}

func Test_batching_codecs(t *testing.T) {
	c := newClient(t)
	codecs := map[string]pulsar.CompressionType{"none": pulsar.NoCompression, "lz4": pulsar.LZ4, "zlib": pulsar.ZLib,
		"zstd": pulsar.ZSTD}
	for name, codec := range codecs {
		tp := topicName("batch-" + name)
		p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, CompressionType: codec, BatchingMaxMessages: 10,
			BatchingMaxPublishDelay: 50 * time.Millisecond})
		cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s"})
		errs := make(chan error, 25)
		for i := 0; i < 25; i++ {
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("payload-%d", i))},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 25; i++ {
			if err := <-errs; err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		equal(t, expected("payload-", 25), receiveN(t, cons, 25))
	}
}

func Test_partitioned(t *testing.T) {
	c := newClient(t)
	tp := topicName("part")
	putJSON(t, "/admin/v2/"+strings.Replace(tp, "://", "/", 1)+"/partitions", "3")
	parts, err := c.TopicPartitions(tp)
	if err != nil || len(parts) != 3 {
		t.Fatalf("partitions: %v %v", parts, err)
	}
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Shared})
	for i := 0; i < 30; i++ {
		send(t, p, &pulsar.ProducerMessage{Key: fmt.Sprintf("k%d", i), Payload: []byte(fmt.Sprintf("m%d", i))})
	}
	got := receiveN(t, cons, 30)
	sort.Strings(got)
	want := expected("m", 30)
	sort.Strings(want)
	equal(t, want, got)
}

func Test_partitions_no_autocreate(t *testing.T) {
	t.Skip("n/a: the Go client has no API for partition metadata without auto-creation")
}

type userV1 struct {
	Name string `json:"name" avro:"name"`
	Age  int    `json:"age" avro:"age"`
}

const avroV1 = `{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"age","type":"int"}]}`
const avroV2 = `{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"age","type":"int"},` +
	`{"name":"email","type":["null","string"],"default":null}]}`
const avroBad = `{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"age","type":"string"}]}`

func schemaScenario(t *testing.T, kind string, mk func(def string) pulsar.Schema) {
	c := newClient(t)
	tp := topicName("schema-" + kind)
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, Schema: mk(avroV1)})
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Schema: mk(avroV1)})
	send(t, p, &pulsar.ProducerMessage{Value: &userV1{Name: "ada", Age: 36}})
	m := receive(t, cons, 10*time.Second)
	var u userV1
	if err := m.GetSchemaValue(&u); err != nil || u.Name != "ada" || u.Age != 36 {
		t.Fatalf("decoded %+v, %v", u, err)
	}
	p2, err := c.CreateProducer(pulsar.ProducerOptions{Topic: tp, Schema: mk(avroV2)})
	if err != nil {
		t.Fatalf("compatible evolution refused: %v", err)
	}
	p2.Close()
	if bad, err := c.CreateProducer(pulsar.ProducerOptions{Topic: tp, Schema: mk(avroBad)}); err == nil {
		bad.Close()
		t.Fatal("an incompatible schema was accepted")
	} else if !strings.Contains(strings.ToLower(err.Error()), "incompatible") {
		t.Fatalf("unclear error for an incompatible schema: %v", err)
	}
}

func Test_schema_avro(t *testing.T) {
	schemaScenario(t, "avro", func(def string) pulsar.Schema { return pulsar.NewAvroSchema(def, nil) })
}

func Test_schema_json(t *testing.T) {
	schemaScenario(t, "json", func(def string) pulsar.Schema { return pulsar.NewJSONSchema(def, nil) })
}

func newReader(t *testing.T, c pulsar.Client, opts pulsar.ReaderOptions) pulsar.Reader {
	r, err := c.CreateReader(opts)
	if err != nil {
		t.Fatalf("reader: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

func next(t *testing.T, r pulsar.Reader) string {
	m, err := r.Next(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatalf("reader next: %v", err)
	}
	return string(m.Payload())
}

func Test_reader_earliest(t *testing.T) {
	c := newClient(t)
	tp := topicName("r-earliest")
	sendN(t, mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true}), "m", 5)
	r := newReader(t, c, pulsar.ReaderOptions{Topic: tp, StartMessageID: pulsar.EarliestMessageID()})
	for _, want := range expected("m", 5) {
		if got := next(t, r); got != want {
			t.Fatalf("want %s got %s", want, got)
		}
	}
	if r.HasNext() {
		t.Fatal("HasNext after the end")
	}
}

func Test_reader_latest(t *testing.T) {
	c := newClient(t)
	tp := topicName("r-latest")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	sendN(t, p, "old", 3)
	r := newReader(t, c, pulsar.ReaderOptions{Topic: tp, StartMessageID: pulsar.LatestMessageID()})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("new")})
	if got := next(t, r); got != "new" {
		t.Fatalf("got %s", got)
	}
}

func Test_reader_message_id(t *testing.T) {
	c := newClient(t)
	tp := topicName("r-id")
	ids := sendN(t, mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true}), "m", 5)
	if got := next(t, newReader(t, c, pulsar.ReaderOptions{Topic: tp, StartMessageID: ids[2]})); got != "m3" {
		t.Fatalf("exclusive start: got %s", got)
	}
	r := newReader(t, c, pulsar.ReaderOptions{Topic: tp, StartMessageID: ids[2], StartMessageIDInclusive: true})
	if got := next(t, r); got != "m2" {
		t.Fatalf("inclusive start: got %s", got)
	}
}

func Test_reader_rollback(t *testing.T) {
	// The Go client has no start-from-rollback option; its way to read "N seconds back" is SeekByTime.
	c := newClient(t)
	tp := topicName("r-rollback")
	sendN(t, mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true}), "m", 3)
	r := newReader(t, c, pulsar.ReaderOptions{Topic: tp, StartMessageID: pulsar.LatestMessageID()})
	if err := r.SeekByTime(time.Now().Add(-time.Hour)); err != nil {
		t.Fatalf("seek by time: %v", err)
	}
	if got := next(t, r); got != "m0" {
		t.Fatalf("got %s", got)
	}
}

func Test_seek(t *testing.T) {
	c := newClient(t)
	tp := topicName("seek")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s"})
	ids := sendN(t, p, "m", 5)
	receiveN(t, cons, 5)
	if err := cons.SeekByTime(time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	if got := string(receive(t, cons, 10*time.Second).Payload()); got != "m0" {
		t.Fatalf("after seek by time: got %s", got)
	}
	if err := cons.Seek(ids[1]); err != nil {
		t.Fatal(err)
	}
	// the broker resumes at m1; the client drops what is not after the seek id, as the Java client does
	if got := string(receive(t, cons, 10*time.Second).Payload()); got != "m2" {
		t.Fatalf("after seek to m1's id: got %s", got)
	}
}

func Test_negative_ack(t *testing.T) {
	c := newClient(t)
	tp := topicName("nack")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Shared,
		NackRedeliveryDelay: 100 * time.Millisecond})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("x")})
	m := receive(t, cons, 10*time.Second)
	if m.RedeliveryCount() != 0 {
		t.Fatalf("first delivery count %d", m.RedeliveryCount())
	}
	cons.Nack(m)
	again := receive(t, cons, 10*time.Second)
	if string(again.Payload()) != "x" || again.RedeliveryCount() != 1 {
		t.Fatalf("redelivered %q count %d", again.Payload(), again.RedeliveryCount())
	}
	_ = cons.Ack(again)
}

func Test_dlq(t *testing.T) {
	c := newClient(t)
	tp := topicName("dlq")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Shared,
		NackRedeliveryDelay: 100 * time.Millisecond, DLQ: &pulsar.DLQPolicy{MaxDeliveries: 2, DeadLetterTopic: tp + "-s-DLQ"}})
	dead := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp + "-s-DLQ", SubscriptionName: "d"})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("poison")})
	for i := 0; i < 2; i++ {
		cons.Nack(receive(t, cons, 10*time.Second))
	}
	if got := string(receive(t, dead, 15*time.Second).Payload()); got != "poison" {
		t.Fatalf("dead letter: %s", got)
	}
}

func Test_retry_topic(t *testing.T) {
	c := newClient(t)
	tp := topicName("retry")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Shared,
		RetryEnable: true, DLQ: &pulsar.DLQPolicy{MaxDeliveries: 3, DeadLetterTopic: tp + "-s-DLQ",
			RetryLetterTopic: tp + "-s-RETRY"}})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("later")})
	m := receive(t, cons, 10*time.Second)
	t0 := time.Now()
	cons.ReconsumeLater(m, time.Second)
	again := receive(t, cons, 15*time.Second)
	if string(again.Payload()) != "later" || again.Properties()["RECONSUMETIMES"] != "1" {
		t.Fatalf("retry: %q %v", again.Payload(), again.Properties())
	}
	if time.Since(t0) < 800*time.Millisecond {
		t.Fatal("retried before its delay")
	}
	_ = cons.Ack(again)
}

func Test_delayed_delivery(t *testing.T) {
	c := newClient(t)
	tp := topicName("delayed")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Shared})
	t0 := time.Now()
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("late"), DeliverAfter: 2 * time.Second})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("now")})
	if got := string(receive(t, cons, 10*time.Second).Payload()); got != "now" {
		t.Fatalf("first: %s", got)
	}
	if got := string(receive(t, cons, 10*time.Second).Payload()); got != "late" {
		t.Fatalf("second: %s", got)
	}
	if time.Since(t0) < 1800*time.Millisecond {
		t.Fatal("delivered too early")
	}
}

func big(n int, seed byte) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%23)
	}
	return string(b)
}

func Test_chunking(t *testing.T) {
	c := newClient(t)
	tp := topicName("chunk")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true, EnableChunking: true,
		ChunkMaxMessageSize: 1000})
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s"})
	payload := big(10000, 'a')
	send(t, p, &pulsar.ProducerMessage{Payload: []byte(payload)})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("small")})
	equal(t, []string{payload, "small"}, receiveN(t, cons, 2))
}

func Test_chunking_shared(t *testing.T) {
	c := newClient(t)
	tp := topicName("chunk-shared")
	c1 := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Shared})
	c2 := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Shared})
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true, EnableChunking: true,
		ChunkMaxMessageSize: 1000})
	want := map[string]bool{}
	for i := 0; i < 12; i++ {
		payload := fmt.Sprintf("%d:%s", i, big(4500, byte('a'+i)))
		want[payload] = true
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(payload)}, nil)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	seen, _ := drain(t, 12, 20*time.Second, c1, c2)
	for k := range seen {
		if !want[k] {
			t.Fatalf("unexpected payload of %d bytes", len(k))
		}
	}
}

func Test_deduplication(t *testing.T) {
	c := newClient(t)
	tp := topicName("dedup")
	putJSON(t, "/admin/v2/"+strings.Replace(tp, "://", "/", 1), "")
	postJSON(t, "/admin/v2/"+strings.Replace(tp, "://", "/", 1)+"/deduplicationEnabled", "true")
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s"})
	for round := 0; round < 2; round++ {
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: tp, Name: "dedup-p", DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		from, to := 0, 5
		if round == 1 {
			from, to = 3, 7
		}
		for i := from; i < to; i++ {
			seq := int64(i)
			send(t, p, &pulsar.ProducerMessage{SequenceID: &seq, Payload: []byte(fmt.Sprintf("m%d", i))})
		}
		p.Close()
	}
	equal(t, expected("m", 7), receiveN(t, cons, 7))
	none(t, cons, 500*time.Millisecond)
}

func Test_regex_new_topic(t *testing.T) {
	c := newClient(t)
	base := unique("re")
	send(t, mustProducer(t, c, pulsar.ProducerOptions{Topic: "persistent://public/default/" + base + "-a"}),
		&pulsar.ProducerMessage{Payload: []byte("first")})
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{TopicsPattern: "persistent://public/default/" + base + "-.*",
		AutoDiscoveryPeriod: time.Second, SubscriptionName: "s"})
	if got := string(receive(t, cons, 10*time.Second).Payload()); got != "first" {
		t.Fatalf("first: %s", got)
	}
	send(t, mustProducer(t, c, pulsar.ProducerOptions{Topic: "persistent://public/default/" + base + "-b"}),
		&pulsar.ProducerMessage{Payload: []byte("later")})
	if got := string(receive(t, cons, 20*time.Second).Payload()); got != "later" {
		t.Fatalf("later: %s", got)
	}
}

func Test_table_view(t *testing.T) {
	c := newClient(t)
	tp := topicName("tv")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true, Schema: pulsar.NewStringSchema(nil)})
	send(t, p, &pulsar.ProducerMessage{Key: "a", Value: "1"})
	send(t, p, &pulsar.ProducerMessage{Key: "b", Value: "2"})
	tv, err := c.CreateTableView(pulsar.TableViewOptions{Topic: tp, Schema: pulsar.NewStringSchema(nil),
		SchemaValueType: reflect.TypeOf((*string)(nil))}) // the Go StringSchema decodes into a *string
	if err != nil {
		t.Fatal(err)
	}
	defer tv.Close()
	get := func(k string) string {
		if v, ok := tv.Get(k).(*string); ok && v != nil {
			return *v
		}
		return ""
	}
	if get("a") != "1" || get("b") != "2" {
		t.Fatalf("view: %v", tv.Entries())
	}
	send(t, p, &pulsar.ProducerMessage{Key: "a", Value: "3"})
	deadline := time.Now().Add(10 * time.Second)
	for get("a") != "3" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling the view: it has no change notification to wait on
	}
	if get("a") != "3" || tv.Size() != 2 {
		t.Fatalf("view after update: %v", tv.Entries())
	}
}

func Test_token_tls(t *testing.T) {
	url, token, ca := need(t, "PULSAR_TLS_URL"), need(t, "PULSAR_TOKEN"), need(t, "PULSAR_CA")
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, TLSTrustCertsFilePath: ca,
		Authentication: pulsar.NewAuthenticationToken(token), OperationTimeout: 15 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tp := topicName("tls")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp})
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s"})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("secret")})
	equal(t, []string{"secret"}, receiveN(t, cons, 1))
	bad, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, TLSTrustCertsFilePath: ca,
		Authentication: pulsar.NewAuthenticationToken("not-a-token"), OperationTimeout: 5 * time.Second,
		Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if bp, err := bad.CreateProducer(pulsar.ProducerOptions{Topic: tp}); err == nil {
		bp.Close()
		t.Fatal("a bad token was accepted")
	}
}

func Test_subscription_properties(t *testing.T) {
	c := newClient(t)
	tp := topicName("subprops")
	mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s",
		SubscriptionProperties: map[string]string{"team": "blue"}})
	var stats struct {
		Subscriptions map[string]struct {
			SubscriptionProperties map[string]string `json:"subscriptionProperties"`
		} `json:"subscriptions"`
	}
	getJSON(t, "/admin/v2/"+strings.Replace(tp, "://", "/", 1)+"/stats", &stats)
	if stats.Subscriptions["s"].SubscriptionProperties["team"] != "blue" {
		t.Fatalf("subscription properties not kept: %+v", stats.Subscriptions["s"])
	}
}

func Test_initial_subscription_refused(t *testing.T) {
	t.Skip("n/a: the Go client does not send initial_subscription_name")
}

func Test_out_counters(t *testing.T) {
	c := newClient(t)
	tp := topicName("counters")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	sendN(t, p, "m", 3)
	receiveN(t, cons, 3)
	cons.Close()
	var stats struct {
		MsgOutCounter int64 `json:"msgOutCounter"`
		Subscriptions map[string]struct {
			MsgOutCounter int64 `json:"msgOutCounter"`
		} `json:"subscriptions"`
	}
	getJSON(t, "/admin/v2/"+strings.Replace(tp, "://", "/", 1)+"/stats", &stats)
	if stats.MsgOutCounter != 3 || stats.Subscriptions["s"].MsgOutCounter != 3 {
		t.Fatalf("out counters after the consumer left: topic %d, subscription %d", stats.MsgOutCounter,
			stats.Subscriptions["s"].MsgOutCounter)
	}
}

func Test_broker_entry_metadata(t *testing.T) {
	c := newClient(t)
	tp := topicName("entrymeta")
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s"})
	sendN(t, p, "m", 2)
	// the plain compat broker runs with both of Pulsar's interceptors and exposes their metadata
	// (compat/run.py): a publish time and a per-topic index from 0 on each message
	for i := uint64(0); i < 2; i++ {
		m := receive(t, cons, 10*time.Second)
		if m.BrokerPublishTime() == nil || m.Index() == nil {
			t.Fatal("no broker entry metadata")
		}
		if *m.Index() != i {
			t.Fatalf("index %d, want %d", *m.Index(), i)
		}
	}
}

func Test_transactions(t *testing.T) {
	// commit and abort across two topics and a subscription; a timeout; never a glimpse of
	// uncommitted or aborted messages (the plain compat broker runs with transactionCoordinatorEnabled)
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: need(t, "PULSAR_URL"), EnableTransaction: true,
		OperationTimeout: 15 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in, out1, out2 := topicName("txn-in"), topicName("txn-out1"), topicName("txn-out2")
	input := mustProducer(t, c, pulsar.ProducerOptions{Topic: in, DisableBatching: true})
	work := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: in, SubscriptionName: "work", Type: pulsar.Shared})
	watch1 := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: out1, SubscriptionName: "watch"})
	watch2 := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: out2, SubscriptionName: "watch"})
	p1 := mustProducer(t, c, pulsar.ProducerOptions{Topic: out1, DisableBatching: true, SendTimeout: -1})
	p2 := mustProducer(t, c, pulsar.ProducerOptions{Topic: out2, DisableBatching: true, SendTimeout: -1})
	sendN(t, input, "in-", 1)
	newTxn := func(d time.Duration) pulsar.Transaction {
		txn, err := c.NewTransaction(d)
		if err != nil {
			t.Fatalf("new transaction: %v", err)
		}
		return txn
	}
	ctx := ctxT(t, 30*time.Second)

	// abort: nothing of it is seen, the input it acknowledged comes back
	m, err := work.Receive(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t1 := newTxn(time.Minute)
	send(t, p1, &pulsar.ProducerMessage{Payload: []byte("aborted-1"), Transaction: t1})
	send(t, p2, &pulsar.ProducerMessage{Payload: []byte("aborted-2"), Transaction: t1})
	if err := work.AckWithTxn(m, t1); err != nil {
		t.Fatalf("ack in transaction: %v", err)
	}
	none(t, watch1, 500*time.Millisecond)
	if err := t1.Abort(ctx); err != nil {
		t.Fatalf("abort: %v", err)
	}
	again, err := work.Receive(ctxT(t, 10*time.Second))
	if err != nil || string(again.Payload()) != "in-0" {
		t.Fatalf("input not redelivered after the abort: %v", err)
	}

	// commit: both outputs appear, the input is acknowledged
	t2 := newTxn(time.Minute)
	send(t, p1, &pulsar.ProducerMessage{Payload: []byte("out-1"), Transaction: t2})
	send(t, p2, &pulsar.ProducerMessage{Payload: []byte("out-2"), Transaction: t2})
	if err := work.AckWithTxn(again, t2); err != nil {
		t.Fatalf("ack in transaction: %v", err)
	}
	none(t, watch2, 500*time.Millisecond)
	if err := t2.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	equal(t, []string{"out-1"}, receiveN(t, watch1, 1))
	equal(t, []string{"out-2"}, receiveN(t, watch2, 1))
	none(t, work, 500*time.Millisecond)

	// timeout: the coordinator aborts it; what follows it is released, it never is
	t3 := newTxn(3 * time.Second)
	send(t, p1, &pulsar.ProducerMessage{Payload: []byte("timed-out"), Transaction: t3})
	send(t, p1, &pulsar.ProducerMessage{Payload: []byte("after-timeout")})
	next, err := watch1.Receive(ctxT(t, 20*time.Second))
	if err != nil || string(next.Payload()) != "after-timeout" {
		t.Fatalf("expected the message behind the timed-out transaction: %v", err)
	}
	none(t, watch1, 300*time.Millisecond)
}
