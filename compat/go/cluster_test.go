package compat

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// clusterClient: a client of the cluster compat/run.py started (given the first broker's URL only; closed when the
// test ends), the two brokers' URLs and the first one's web URL; the test is skipped when there is no cluster.
func clusterClient(t *testing.T, transactions bool) (c pulsar.Client, url, url2, web string) {
	url = os.Getenv("PULSAR_CLUSTER_URL")
	if url == "" {
		t.Skip("not covered: compat/run.py started no cluster here (no java or no BookKeeper jars)")
	}
	web = need(t, "PULSAR_CLUSTER_HTTP")
	url2 = need(t, "PULSAR_CLUSTER_URL2")
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, EnableTransaction: transactions,
		OperationTimeout: 30 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(c.Close)
	return c, url, url2, web
}

// Test_cluster_lookup: two brokers in cluster mode (one ZooKeeper, two bookies) started by compat/run.py. The client
// is given only the first broker's URL and must follow lookups to whichever broker owns each topic's bundle.
func Test_cluster_lookup(t *testing.T) {
	c, url, url2, web := clusterClient(t, false)

	const topics, perTopic, partitions, partitioned = 8, 5, 4, 20
	names := make([]string, topics)
	for i := range names {
		names[i] = topicName("cluster")
	}
	for _, tp := range names {
		p := mustProducer(t, c, pulsar.ProducerOptions{Topic: tp, DisableBatching: true})
		sendN(t, p, tp+"/", perTopic)
		p.Close()
	}
	for _, tp := range names {
		cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: tp, SubscriptionName: "s", Type: pulsar.Exclusive})
		equal(t, expected(tp+"/", perTopic), receiveN(t, cons, perTopic))
		cons.Close()
	}

	pt := topicName("cluster-part")
	httpDo(t, http.MethodPut, web+"/admin/v2/"+strings.Replace(pt, "://", "/", 1)+"/partitions", "4", nil)
	parts, err := c.TopicPartitions(pt)
	if err != nil || len(parts) != partitions {
		t.Fatalf("partitions: %v %v", parts, err)
	}
	cons := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: pt, SubscriptionName: "s", Type: pulsar.Shared})
	p := mustProducer(t, c, pulsar.ProducerOptions{Topic: pt, DisableBatching: true})
	for i := 0; i < partitioned; i++ {
		send(t, p, &pulsar.ProducerMessage{Key: fmt.Sprintf("k%d", i), Payload: []byte(fmt.Sprintf("p%d", i))})
	}
	got := receiveN(t, cons, partitioned)
	sort.Strings(got)
	want := expected("p", partitioned)
	sort.Strings(want)
	equal(t, want, got)

	// Who owns what, asked of the first broker only (HTTP lookup; net/http follows a 307): both brokers own some.
	owners := map[string]string{}
	for _, tp := range append(append([]string{}, names...), parts...) {
		var data struct {
			BrokerURL string `json:"brokerUrl"`
		}
		httpDo(t, http.MethodGet, web+"/lookup/v2/topic/"+strings.Replace(tp, "://", "/", 1), "", &data)
		owners[tp] = data.BrokerURL
	}
	seen := map[string]bool{}
	for _, o := range owners {
		seen[o] = true
	}
	if len(seen) != 2 || !seen[url] || !seen[url2] {
		t.Fatalf("owners should be both brokers %s and %s: %v", url, url2, owners)
	}
}

func httpDo(t *testing.T, method, url, body string, out any) {
	var reader io.Reader
	if body != "" {
		reader = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, reader)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	client := http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, b)
		}
	}
}

// Test_cluster_transactions: a transaction whose coordinator (the owner of transaction_coordinator_assign-partition-0)
// is on one broker produces to a topic of each broker and acknowledges on a subscription of the other broker's topic;
// abort then commit, seen by consumers of both. The Go client's producers never send txn_enabled and its SENDs carry
// the transaction in CommandSend only: the other broker's topics are prepared by their first transactional SEND.
func Test_cluster_transactions(t *testing.T) {
	c, url, url2, web := clusterClient(t, true)

	coordinator := lookupBroker(t, web, "persistent://pulsar/system/transaction_coordinator_assign-partition-0")
	other := url
	if coordinator == url {
		other = url2
	}
	in := topicOn(t, web, other, "cluster-txn-in")
	outThere := topicOn(t, web, other, "cluster-txn-out")
	outHere := topicOn(t, web, coordinator, "cluster-txn-out")
	input := mustProducer(t, c, pulsar.ProducerOptions{Topic: in, DisableBatching: true})
	work := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: in, SubscriptionName: "work", Type: pulsar.Shared})
	watchThere := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: outThere, SubscriptionName: "watch"})
	watchHere := mustSubscribe(t, c, pulsar.ConsumerOptions{Topic: outHere, SubscriptionName: "watch"})
	there := mustProducer(t, c, pulsar.ProducerOptions{Topic: outThere, DisableBatching: true, SendTimeout: -1})
	here := mustProducer(t, c, pulsar.ProducerOptions{Topic: outHere, DisableBatching: true, SendTimeout: -1})
	sendN(t, input, "in-", 1)
	newTxn := func() pulsar.Transaction {
		txn, err := c.NewTransaction(time.Minute)
		if err != nil {
			t.Fatalf("new transaction: %v", err)
		}
		return txn
	}
	ctx := ctxT(t, 60*time.Second)

	// abort: nothing of it is seen, the input it acknowledged comes back
	m := receive(t, work, 30*time.Second)
	aborted := newTxn()
	send(t, there, &pulsar.ProducerMessage{Payload: []byte("aborted"), Transaction: aborted})
	send(t, here, &pulsar.ProducerMessage{Payload: []byte("aborted"), Transaction: aborted})
	if err := work.AckWithTxn(m, aborted); err != nil {
		t.Fatalf("ack in transaction: %v", err)
	}
	if err := aborted.Abort(ctx); err != nil {
		t.Fatalf("abort: %v", err)
	}
	again := receive(t, work, 30*time.Second)
	if string(again.Payload()) != "in-0" {
		t.Fatalf("expected the input acknowledged by the aborted transaction again, got %q", again.Payload())
	}

	// commit: both outputs appear (not before), the input is acknowledged
	committed := newTxn()
	send(t, there, &pulsar.ProducerMessage{Payload: []byte("committed"), Transaction: committed})
	send(t, here, &pulsar.ProducerMessage{Payload: []byte("committed"), Transaction: committed})
	if err := work.AckWithTxn(again, committed); err != nil {
		t.Fatalf("ack in transaction: %v", err)
	}
	none(t, watchThere, 500*time.Millisecond)
	if err := committed.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	equal(t, []string{"committed"}, receiveN(t, watchThere, 1))
	equal(t, []string{"committed"}, receiveN(t, watchHere, 1))
	none(t, watchThere, 500*time.Millisecond)
	none(t, watchHere, 500*time.Millisecond)
	none(t, work, 500*time.Millisecond)
}

// lookupBroker: the broker service URL that owns topic, asked of the broker at web (HTTP lookup; a 307 is followed).
func lookupBroker(t *testing.T, web, topic string) string {
	var data struct {
		BrokerURL string `json:"brokerUrl"`
	}
	httpDo(t, http.MethodGet, web+"/lookup/v2/topic/"+strings.Replace(topic, "://", "/", 1), "", &data)
	return data.BrokerURL
}

// topicOn: a new topic that broker owns (its bundle is placed by the lookup; names landing elsewhere are skipped).
func topicOn(t *testing.T, web, broker, prefix string) string {
	for i := 0; i < 40; i++ {
		tp := topicName(prefix)
		if lookupBroker(t, web, tp) == broker {
			return tp
		}
	}
	t.Fatalf("no topic placed on %s", broker)
	return ""
}
