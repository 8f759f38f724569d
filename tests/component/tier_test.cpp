// The disk tier against the fake llama-server: warmslot as the app runs it (monitor, disk tier,
// pipeline) in this process, slot files in a temporary directory. Assertions are on what the
// fake was asked, the files it holds, the proxy's headers and its status JSON and counters.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "tier_harness.hpp"

namespace warmslot::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr std::size_t doc_bytes = 2000;

fake_options in_dir(fake_options o, const fs::path& dir, const std::string& name) {
    o.slot_dir = (dir / ("slots-" + name)).string();
    fs::create_directories(o.slot_dir);
    if (o.model_path.empty()) o.model_path = (dir / "model.gguf").string();
    return o;
}

// One fake backend "a" and warmslot in front of it, ready to plan.
struct one_backend {
    temp_dir tmp;
    fake_llama fake;
    tier_proxy proxy;
    explicit one_backend(fake_options o = {}, std::function<void(config::config&)> tune = {})
        : fake(in_dir(std::move(o), tmp.path, "a")), proxy(make(fake, tmp, tune)) {
        REQUIRE(eventually([&] { return proxy.ready(0); }, 5s));
    }
    static config::config make(const fake_llama& f, const temp_dir& t,
                               const std::function<void(config::config&)>& tune) {
        auto c = tier_config({backend_for("a", f)}, t.path.string());
        if (tune) tune(c);
        return c;
    }
};

fake_options slots(int n) {
    fake_options o;
    o.slots = n;
    return o;
}

json timings_of(const http_reply& r) {
    const auto j = json::parse(r.body, nullptr, false);
    return j.is_object() && j.contains("timings") ? j["timings"] : json();
}

std::string filename_of(const fake_call& c) {
    return json::parse(c.body, nullptr, false).value("filename", "");
}

std::vector<fake_call> answered(std::vector<fake_call> calls, unsigned status) {
    std::erase_if(calls, [&](const fake_call& c) { return c.status != status; });
    return calls;
}

std::vector<std::string> bin_files(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) {
        const auto name = e.path().filename().string();
        if (name.starts_with("ws-") && name.ends_with(".bin")) out.push_back(name);
    }
    return out;
}

// The tokens a slot file holds (the fake writes llama.cpp's sequence-state layout).
std::vector<int> file_tokens(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    const std::string b{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const auto u32 = [&](std::size_t at) {
        std::uint32_t v = 0;
        for (int i = 3; i >= 0; --i)
            v = v << 8 | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
        return v;
    };
    std::vector<int> out;
    if (b.size() < 12) return out;
    for (std::uint32_t i = 0; i < u32(8); ++i) out.push_back(static_cast<int>(u32(12 + 4 * i)));
    return out;
}

std::uint64_t tokens_in(const std::string& disk_header, const std::string& verb) {
    const auto at = disk_header.find(verb + " ");
    if (at == std::string::npos) return 0;
    return std::stoull(disk_header.substr(at + verb.size() + 1));
}

}  // namespace

TEST_CASE("tier: a request's stable prefix is primed, saved from its slot and indexed") {
    one_backend b;
    const auto body = chat_body(document(1, doc_bytes), "What is on line 3?");
    const auto r = b.proxy.chat(body);
    REQUIRE(r.status == 200);
    CAPTURE(r.head());
    const auto disk = r.header("x-warmslot-disk");
    REQUIRE(disk.starts_with("snapshot "));
    const auto n = tokens_in(disk, "snapshot");
    const auto prompt = prompt_tokens(body);
    CHECK(n > doc_bytes);
    CHECK(n < prompt.size());

    const auto saves = answered(b.fake.calls("save"), 200);
    REQUIRE(saves.size() == 1);
    CHECK(std::to_string(saves[0].slot) == r.header("x-warmslot-slot"));
    const auto file = filename_of(saves[0]);
    CHECK(file.starts_with("ws-"));
    // The file holds exactly the prefix: the prompt's first n tokens.
    const auto held = file_tokens(fs::path(b.fake.options().slot_dir) / file);
    REQUIRE(held.size() == n);
    CHECK(std::equal(held.begin(), held.end(), prompt.begin()));
    // The priming ran on the same slot before the request, and the request reused it.
    const auto chats = b.fake.calls("/v1/chat/completions");
    REQUIRE(chats.size() == 1);
    CHECK(saves[0].at < chats[0].at);
    CHECK(timings_of(r)["cache_n"] == n);
    CHECK(r.header("x-warmslot-primed-tokens") == std::to_string(n));

    const auto files = b.proxy.indexed_files();
    REQUIRE(files.count(b.fake.options().slot_dir) == 1);
    const auto& listed = files.at(b.fake.options().slot_dir);
    REQUIRE(listed.size() == 1);
    CHECK(listed[0]["file"] == file);
    CHECK(listed[0]["tokens"] == n);
}

TEST_CASE("tier: a prefix is restored into its slot after another prompt overwrote it") {
    one_backend b(slots(1));
    const auto doc = document(1, doc_bytes);
    const auto first = b.proxy.chat(chat_body(doc, "Question one?"));
    REQUIRE(first.header("x-warmslot-disk").starts_with("snapshot "));
    const auto n = tokens_in(first.header("x-warmslot-disk"), "snapshot");
    const auto file = filename_of(answered(b.fake.calls("save"), 200).at(0));

    const auto other = b.proxy.chat(chat_body(document(2, doc_bytes), "Question two?"));
    REQUIRE(other.status == 200);
    const auto other_prompt = prompt_tokens(chat_body(document(2, doc_bytes), "Question two?"));
    CHECK(b.fake.slot_tokens(0).size() >= other_prompt.size());  // doc 1 is gone from the slot

    const auto before = b.fake.calls("restore").size();
    const auto body = chat_body(doc, "Question three?");
    const auto again = b.proxy.chat(body);
    REQUIRE(again.status == 200);
    CAPTURE(again.head());
    CHECK(again.header("x-warmslot-route").starts_with("miss"));
    CHECK(again.header("x-warmslot-disk") == "restored " + std::to_string(n) + " tokens");
    const auto restores = b.fake.calls("restore");
    REQUIRE(restores.size() == before + 1);
    CHECK(restores.back().slot == 0);
    CHECK(filename_of(restores.back()) == file);
    CHECK(restores.back().status == 200);
    // The request reused the restored prefix and computed only its own question.
    CHECK(timings_of(again)["cache_n"] == n);
    CHECK(timings_of(again)["prompt_n"] == prompt_tokens(body).size() - n);
}

TEST_CASE(
    "tier: a slot holding the prefix and more is kept until rollbacks prove costly, then "
    "restored") {
    // A hybrid model without checkpoints: a prompt that parts from the slot's inside what it
    // holds is computed in full. warmslot cannot know that before it has seen it once.
    fake_options o = slots(1);
    o.reuse = fake_options::rollback::extension_only;
    one_backend b(o);
    const auto doc = document(3, doc_bytes);
    const auto first = b.proxy.chat(chat_body(doc, "First question?"));
    REQUIRE(first.header("x-warmslot-disk").starts_with("snapshot "));
    const auto n = tokens_in(first.header("x-warmslot-disk"), "snapshot");
    const auto restores = b.fake.calls("restore").size();  // the snapshot's own reload

    const auto second = b.proxy.chat(chat_body(doc, "Second question?"));
    CAPTURE(second.head());
    CHECK(second.header("x-warmslot-route").starts_with("hit"));
    CHECK(second.header("x-warmslot-disk").starts_with("slot kept: "));
    CHECK(b.fake.calls("restore").size() == restores);
    CHECK(timings_of(second)["cache_n"] == 0);  // the fake rolled back to nothing

    const auto body = chat_body(doc, "Third question?");
    const auto third = b.proxy.chat(body);
    CAPTURE(third.head());
    CHECK(third.header("x-warmslot-disk")
              .starts_with("restored " + std::to_string(n) + " tokens, cheaper than a rollback"));
    REQUIRE(b.fake.calls("restore").size() == restores + 1);
    CHECK(timings_of(third)["cache_n"] == n);
    CHECK(timings_of(third)["prompt_n"] == prompt_tokens(body).size() - n);
}

TEST_CASE("tier: on a hybrid model run without checkpoints the file is restored the first time") {
    fake_options o = slots(1);
    o.reuse = fake_options::rollback::extension_only;
    o.architecture = "qwen35";
    one_backend b(o, [](config::config& c) { c.backends[0].ctx_checkpoints = 0; });
    const auto doc = document(4, doc_bytes);
    const auto first = b.proxy.chat(chat_body(doc, "First question?"));
    REQUIRE(first.header("x-warmslot-disk").starts_with("snapshot "));
    const auto n = tokens_in(first.header("x-warmslot-disk"), "snapshot");
    const auto second = b.proxy.chat(chat_body(doc, "Second question?"));
    CAPTURE(second.head());
    CHECK(second.header("x-warmslot-disk")
              .starts_with("restored " + std::to_string(n) + " tokens, cheaper than a rollback"));
    CHECK(timings_of(second)["cache_n"] == n);
}

TEST_CASE("tier: a failed save leaves no file and no row; the request is answered") {
    one_backend b(slots(1));
    b.fake.fail("save", 500, "failed to save slot: write error", 1);
    const auto r = b.proxy.chat(chat_body(document(5, doc_bytes), "Question?"));
    CAPTURE(r.head());
    CHECK(r.status == 200);
    REQUIRE(b.fake.calls("save").size() == 1);
    CHECK(b.fake.calls("save")[0].status == 500);
    CHECK(r.header("x-warmslot-disk").empty());
    CHECK(b.fake.calls("restore").empty());
    // What the broken write left is removed, and nothing is indexed.
    CHECK(eventually([&] { return bin_files(b.fake.options().slot_dir).empty(); }, 2s));
    const auto files = b.proxy.indexed_files();
    CHECK((files.empty() || files.begin()->second.empty()));
    // The next request on the same prefix is still answered from the slot.
    const auto again = b.proxy.chat(chat_body(document(5, doc_bytes), "Another?"));
    CHECK(again.status == 200);
    CHECK(again.header("x-warmslot-route").starts_with("hit"));
    // Automatic saves on this backend pause after a failure (10 s): another prefix is not saved.
    const auto other = b.proxy.chat(chat_body(document(50, doc_bytes), "Other?"));
    CHECK(other.status == 200);
    CHECK(b.fake.calls("save").size() == 1);
}

TEST_CASE("tier: a backend that cannot render or tokenize a request gets it as it is") {
    one_backend b(slots(1));
    SUBCASE("/apply-template fails") { b.fake.fail("/apply-template", 500, "template error", -1); }
    SUBCASE("/tokenize fails") { b.fake.fail("/tokenize", 500, "tokenizer error", -1); }
    const auto r = b.proxy.chat(chat_body(document(51, doc_bytes), "Q?"));
    CAPTURE(r.head());
    CHECK(r.status == 200);
    CHECK(r.header("x-warmslot-disk").empty());
    CHECK(b.fake.calls("save").empty());
    CHECK(b.fake.calls("/completion").size() == 0);
    const auto chats = b.fake.calls("/v1/chat/completions");
    REQUIRE(chats.size() == 1);
    CHECK(json::parse(chats[0].body)["id_slot"] == 0);
}

TEST_CASE("tier: a restore that fails keeps the file when it is intact and drops it when damaged") {
    one_backend b(slots(1));
    const auto doc = document(6, doc_bytes);
    const auto first = b.proxy.chat(chat_body(doc, "Q1?"));
    const auto n = tokens_in(first.header("x-warmslot-disk"), "snapshot");
    REQUIRE(n > 0);
    const auto file = filename_of(answered(b.fake.calls("save"), 200).at(0));
    const auto dir = b.fake.options().slot_dir;
    REQUIRE(b.proxy.chat(chat_body(document(7, doc_bytes), "Q2?")).status == 200);

    SUBCASE("a 500: kept, and restored on the next miss") {
        b.fake.fail("restore", 500, "internal error", 1);
        const auto r = b.proxy.chat(chat_body(doc, "Q3?"));
        CAPTURE(r.head());
        CHECK(r.status == 200);
        CHECK(r.header("x-warmslot-disk") == "restore failed, file kept, recomputed");
        CHECK(timings_of(r)["cache_n"] == 0);  // the failed restore emptied the slot
        CHECK(fs::exists(fs::path(dir) / file));
        REQUIRE(b.proxy.chat(chat_body(document(7, doc_bytes), "Q4?")).status == 200);
        const auto ok = b.proxy.chat(chat_body(doc, "Q5?"));
        CHECK(ok.header("x-warmslot-disk") == "restored " + std::to_string(n) + " tokens");
        CHECK(timings_of(ok)["cache_n"] == n);
    }
    SUBCASE("a restore slower than cache.slot_call_timeout: kept, the request recomputes") {
        b.fake.delay("restore", 2500ms, 1);  // slot_call_timeout is 2 s
        const auto r = b.proxy.chat(chat_body(doc, "Q3?"));
        CAPTURE(r.head());
        CHECK(r.status == 200);
        CHECK(r.header("x-warmslot-disk") == "restore failed, file kept, recomputed");
        CHECK(fs::exists(fs::path(dir) / file));
        const auto files = b.proxy.indexed_files().at(dir);
        CHECK(std::any_of(files.begin(), files.end(),
                          [&](const json& f) { return f["file"] == file; }));
    }
    SUBCASE("a truncated file: llama-server's 400, the file and its row dropped") {
        fs::resize_file(fs::path(dir) / file, 100);
        const auto r = b.proxy.chat(chat_body(doc, "Q3?"));
        CAPTURE(r.head());
        CHECK(r.status == 200);
        CHECK(r.header("x-warmslot-disk") == "restore failed, file dropped, recomputed");
        CHECK(b.fake.calls("restore").back().status == 400);
        CHECK(eventually([&] { return !fs::exists(fs::path(dir) / file); }, 2s));
        const auto files = b.proxy.indexed_files().at(dir);
        CHECK(std::none_of(files.begin(), files.end(),
                           [&](const json& f) { return f["file"] == file; }));
    }
}

TEST_CASE("tier: a replica's file is brought into the backend's own directory and restored") {
    temp_dir tmp;
    // Another file system for b's directory: the file is copied, not linked.
    const bool across = fs::exists("/dev/shm") && fs::is_directory("/dev/shm");
    std::optional<temp_dir> elsewhere;
    SUBCASE("same file system: linked") {}
    SUBCASE("another file system: copied") {
        if (!across) return;
        elsewhere.emplace("/dev/shm");
    }
    const std::string how = elsewhere ? "copied" : "linked";
    // The same model (content) under two names, the same build and layout: the same identity,
    // and requests for "fa" or "fb" go to one backend each.
    fake_options oa = slots(1), ob = slots(1);
    oa.alias = "fa";
    ob.alias = "fb";
    oa.architecture = ob.architecture = "llama";
    oa.model_path = (tmp.path / "fa.gguf").string();
    ob.model_path = (tmp.path / "fb.gguf").string();
    fake_llama a(in_dir(oa, tmp.path, "a")),
        b(in_dir(ob, elsewhere ? elsewhere->path : tmp.path, "b"));
    tier_proxy proxy(tier_config({backend_for("a", a), backend_for("b", b)}, tmp.path.string()));
    REQUIRE(eventually([&] { return proxy.ready(0) && proxy.ready(1); }, 5s));

    const auto doc = document(8, doc_bytes);
    auto body = chat_body(doc, "Asked on a?");
    body["model"] = "fa";
    const auto first = proxy.chat(body);
    REQUIRE(first.header("x-warmslot-backend") == "a");
    const auto n = tokens_in(first.header("x-warmslot-disk"), "snapshot");
    REQUIRE(n > 0);
    const auto file = filename_of(answered(a.calls("save"), 200).at(0));

    body = chat_body(doc, "Asked on b?");
    body["model"] = "fb";
    const auto second = proxy.chat(body);
    CAPTURE(second.head());
    CHECK(second.header("x-warmslot-backend") == "b");
    CHECK(second.header("x-warmslot-disk") ==
          "restored " + std::to_string(n) + " tokens (from replica a, " + how + ")");
    CHECK(b.calls("save").empty());
    REQUIRE(b.calls("restore").size() == 1);
    CHECK(filename_of(b.calls("restore")[0]) == file);
    CHECK(fs::exists(fs::path(b.options().slot_dir) / file));
    CHECK(timings_of(second)["cache_n"] == n);
    CHECK(proxy.metrics().find("warmslot_replica_files_total{result=\"" + how + "\"} 1") !=
          std::string::npos);
    const auto files = proxy.indexed_files();
    CHECK(files.at(b.options().slot_dir).size() == 1);
}

TEST_CASE(
    "tier: a prefix saved by one warmslot is published to the shared tier and restored by "
    "another") {
    temp_dir tmp;
    const auto shared = tmp.path / "shared";
    fs::create_directories(shared);
    fake_options o = slots(1);
    o.model_path = (tmp.path / "model.gguf").string();
    fake_llama a(in_dir(o, tmp.path, "a")), b(in_dir(o, tmp.path, "b"));
    const auto config_for = [&](const fake_llama& f, const std::string& name) {
        auto c = tier_config({backend_for(name, f)}, (tmp.path / ("state-" + name)).string());
        c.cache.shared_dir = shared.string();
        return c;
    };
    tier_proxy one(config_for(a, "a"));
    tier_proxy two(config_for(b, "b"));
    REQUIRE(eventually([&] { return one.ready(0) && two.ready(0); }, 5s));

    const auto doc = document(9, doc_bytes);
    const auto first = one.chat(chat_body(doc, "On the first host?"));
    const auto n = tokens_in(first.header("x-warmslot-disk"), "snapshot");
    REQUIRE(n > 0);
    REQUIRE(eventually(
        [&] {
            return one.metrics().find(
                       "warmslot_shared_files_total{op=\"publish\",result=\"published\"} 1") !=
                   std::string::npos;
        },
        5s));

    const auto second = two.chat(chat_body(doc, "On the second host?"));
    CAPTURE(second.head());
    CHECK(second.header("x-warmslot-disk") ==
          "restored " + std::to_string(n) + " tokens (from the shared tier, copied)");
    CHECK(b.calls("save").empty());
    REQUIRE(b.calls("restore").size() == 1);
    CHECK(timings_of(second)["cache_n"] == n);
    CHECK(two.indexed_files().at(b.options().slot_dir).size() == 1);
}

TEST_CASE(
    "tier: on a full-attention model a streamed request runs at once and its prefix is saved after "
    "the answer") {
    fake_options o = slots(1);
    o.architecture = "llama";
    one_backend b(o);
    const auto doc = document(20, doc_bytes);
    const auto body = chat_body(doc, "Streamed?", true);
    const auto r = b.proxy.chat(body);
    CAPTURE(r.head());
    REQUIRE(r.status == 200);
    CHECK(r.body.find("data: [DONE]") != std::string::npos);
    const auto disk = r.header("x-warmslot-disk");
    REQUIRE(disk.ends_with(" tokens after the answer"));
    const auto n = tokens_in(disk, "snapshot");
    REQUIRE(n > doc_bytes);
    CHECK(r.header("x-warmslot-primed-tokens").empty());  // nothing primed before it
    CHECK(b.fake.calls("/completion").empty());

    // After the answer: the slot checked idle and holding the prompt and answer, then saved.
    REQUIRE(b.fake.wait_for(
        [](const std::vector<fake_call>& calls) {
            return std::any_of(calls.begin(), calls.end(), [](const fake_call& c) {
                return c.key == "save" && c.status == 200;
            });
        },
        3s));
    const auto save = b.fake.calls("save").at(0);
    CHECK(save.at > b.fake.calls("/v1/chat/completions").at(0).at);
    const auto dir = b.fake.options().slot_dir;
    const auto held = file_tokens(fs::path(dir) / filename_of(save));
    const auto prompt = prompt_tokens(body);
    CHECK(held.size() == prompt.size() + 1);  // the prompt and the answer but its last token
    CHECK(std::equal(prompt.begin(), prompt.end(), held.begin()));
    REQUIRE(eventually([&] { return b.proxy.indexed_files()[dir].size() == 1; }, 2s));
    CHECK(b.proxy.indexed_files()[dir][0]["tokens"] == n);  // the row covers the prefix

    REQUIRE(b.proxy.chat(chat_body(document(21, doc_bytes), "Other?")).status == 200);
    const auto again = b.proxy.chat(chat_body(doc, "Again?"));
    CAPTURE(again.head());
    CHECK(again.header("x-warmslot-disk") == "restored " + std::to_string(n) + " tokens");
    CHECK(timings_of(again)["cache_n"] >= n);
}

// However warmslot places the second (waiting for the first's slot, or restoring the file the
// first is saving into the other slot), the prefix is computed once.
TEST_CASE("tier: two requests on one new prefix at once compute it once") {
    one_backend b(slots(2));
    b.fake.delay("save", 300ms,
                 1);  // the first request's save is still running when the second plans
    const auto doc = document(22, doc_bytes);
    http_reply first, second;
    std::thread other([&] { first = b.proxy.chat(chat_body(doc, "One?")); });
    REQUIRE(b.fake.wait_for(
        [](const std::vector<fake_call>& calls) {
            return std::any_of(calls.begin(), calls.end(),
                               [](const fake_call& c) { return c.key == "save"; });
        },
        3s));
    second = b.proxy.chat(chat_body(doc, "Two?"));
    other.join();
    CAPTURE(first.head());
    CAPTURE(second.head());
    REQUIRE(first.status == 200);
    REQUIRE(second.status == 200);
    const auto n = tokens_in(first.header("x-warmslot-disk"), "snapshot");
    REQUIRE(n > 0);
    CHECK(answered(b.fake.calls("save"), 200).size() == 1);
    // Everything llama-server computed for both: the priming once, then each question.
    const auto computed = [](const http_reply& r) {
        const auto primed = r.header("x-warmslot-primed-tokens");
        return timings_of(r)["prompt_n"].get<std::uint64_t>() +
               (primed.empty() ? 0 : std::stoull(primed));
    };
    const auto questions = prompt_tokens(chat_body(doc, "One?")).size() - n +
                           prompt_tokens(chat_body(doc, "Two?")).size() - n;
    CHECK(computed(first) + computed(second) <= n + questions);
}

TEST_CASE("tier: over cache.max_disk the index and the directory lose the same files") {
    one_backend b(slots(1), [](config::config& c) { c.cache.max_disk = 60000; });  // two files
    const auto dir = b.fake.options().slot_dir;
    std::string last;
    for (int doc = 30; doc < 34; ++doc) {
        const auto r = b.proxy.chat(chat_body(document(doc, doc_bytes), "Q?"));
        CAPTURE(r.head());
        REQUIRE(r.header("x-warmslot-disk").starts_with("snapshot "));
        last = filename_of(answered(b.fake.calls("save"), 200).back());
    }
    CHECK(answered(b.fake.calls("save"), 200).size() == 4);
    std::vector<std::string> listed;
    std::uint64_t bytes = 0;
    const auto files = b.proxy.indexed_files().at(dir);
    for (const auto& f : files) {
        listed.push_back(f["file"].get<std::string>());
        bytes += f["bytes"].get<std::uint64_t>();
    }
    std::sort(listed.begin(), listed.end());
    auto on_disk = bin_files(dir);
    std::sort(on_disk.begin(), on_disk.end());
    CHECK(listed == on_disk);
    CHECK(listed.size() == 2);
    CHECK(bytes <= 60000);
    CHECK(std::find(listed.begin(), listed.end(), last) != listed.end());
}

TEST_CASE("tier: a warmslot started again finds its files; a stray file is removed") {
    temp_dir tmp;
    fake_llama fake(in_dir(slots(1), tmp.path, "a"));
    const auto dir = fake.options().slot_dir;
    const auto doc = document(35, doc_bytes);
    std::uint64_t n = 0;
    {
        tier_proxy proxy(tier_config({backend_for("a", fake)}, tmp.path.string()));
        REQUIRE(eventually([&] { return proxy.ready(0); }, 5s));
        n = tokens_in(proxy.chat(chat_body(doc, "Before?")).header("x-warmslot-disk"), "snapshot");
        REQUIRE(n > 0);
    }
    std::ofstream(fs::path(dir) / "ws-00000000deadbeef.bin") << "left over";
    fake.restart();  // the slot is empty: only the file can bring the prefix back
    tier_proxy proxy(tier_config({backend_for("a", fake)}, tmp.path.string()));
    REQUIRE(eventually([&] { return proxy.ready(0); }, 5s));
    CHECK(!fs::exists(fs::path(dir) / "ws-00000000deadbeef.bin"));
    CHECK(proxy.indexed_files().at(dir).size() == 1);
    const auto r = proxy.chat(chat_body(doc, "After?"));
    CAPTURE(r.head());
    CHECK(r.header("x-warmslot-disk") == "restored " + std::to_string(n) + " tokens");
    CHECK(timings_of(r)["cache_n"] == n);
}

TEST_CASE("tier: a restart while a restore runs leaves the file indexed and the request answered") {
    one_backend b(slots(1));
    const auto doc = document(36, doc_bytes);
    const auto n =
        tokens_in(b.proxy.chat(chat_body(doc, "Q1?")).header("x-warmslot-disk"), "snapshot");
    REQUIRE(n > 0);
    const auto file = filename_of(answered(b.fake.calls("save"), 200).at(0));
    REQUIRE(b.proxy.chat(chat_body(document(37, doc_bytes), "Q2?")).status == 200);
    const auto restores = b.fake.calls("restore").size();
    b.fake.delay("restore", 1500ms, 1);
    http_reply r;
    std::thread client([&] { r = b.proxy.chat(chat_body(doc, "Q3?")); });
    const bool started = b.fake.wait_for(
        [&](const std::vector<fake_call>& c) {
            return std::count_if(c.begin(), c.end(), [](const fake_call& x) {
                       return x.key == "restore";
                   }) > static_cast<long>(restores);
        },
        3s);
    b.fake.restart();
    client.join();
    REQUIRE(started);
    CAPTURE(r.head());
    CAPTURE(r.body);
    CHECK(r.status == 200);
    // The dropped restore was a sign of a restart: the request was planned again on the new
    // process, where the file was restored.
    CHECK(r.header("x-warmslot-disk") == "restored " + std::to_string(n) + " tokens");
    CHECK(timings_of(r)["cache_n"] == n);
    CHECK(b.fake.calls("restore").back().status == 200);
    CHECK(fs::exists(fs::path(b.fake.options().slot_dir) / file));
    const auto files = b.proxy.indexed_files().at(b.fake.options().slot_dir);
    CHECK(
        std::any_of(files.begin(), files.end(), [&](const json& f) { return f["file"] == file; }));
    // The request ran on the new process: whatever warmslot did, what it believes of the slot
    // is what the slot holds.
    CHECK(eventually([&] { return b.proxy.believed_tokens(0, 0) == b.fake.slot_tokens(0).size(); },
                     3s));
}

TEST_CASE("tier: a slot another task used between the answer and its save gives no file") {
    fake_options o = slots(1);
    o.architecture = "llama";
    // Checks far apart: the only GET /slots after the answer is the save's own check.
    one_backend b(o, [](config::config& c) { c.routing.reconcile_interval = 30s; });
    b.fake.delay("/slots", 300ms, 1);
    const auto reads = b.fake.calls("/slots").size();  // the monitor's, at start
    http_reply r;
    std::thread client(
        [&] { r = b.proxy.chat(chat_body(document(52, doc_bytes), "Streamed?", true)); });
    const bool checking = b.fake.wait_for(
        [&](const std::vector<fake_call>& calls) {
            return static_cast<std::size_t>(std::count_if(
                       calls.begin(), calls.end(),
                       [](const fake_call& c) { return c.key == "/slots" && c.handled; })) > reads;
        },
        3s);
    // The check has read the slot; before the save, another client's task replaces it.
    b.fake.put_tokens(0, fake_tokenize("another client's prompt", true, true));
    client.join();
    REQUIRE(checking);
    CAPTURE(r.head());
    REQUIRE(r.header("x-warmslot-disk").ends_with("after the answer"));
    const auto dir = b.fake.options().slot_dir;
    // The save ran, wrote the other prompt, and was thrown away: no row, no file.
    REQUIRE(b.fake.wait_for(
        [](const std::vector<fake_call>& calls) {
            return std::any_of(calls.begin(), calls.end(), [](const fake_call& c) {
                return c.key == "save" && c.status == 200;
            });
        },
        3s));
    CHECK(eventually([&] { return bin_files(dir).empty(); }, 2s));
    const auto files = b.proxy.indexed_files();
    CHECK((files.count(dir) == 0 || files.at(dir).empty()));
}

TEST_CASE("tier: the budget never evicts a file while it is being restored") {
    // Room for two files. file 1 is the oldest, so the first that a third file would evict,
    // unless it is being restored at that moment.
    one_backend b(slots(2), [](config::config& c) { c.cache.max_disk = 60000; });
    const auto dir = b.fake.options().slot_dir;
    const auto doc1 = document(60, doc_bytes);
    const auto first = b.proxy.chat(chat_body(doc1, "Q1?"));
    const auto n = tokens_in(first.header("x-warmslot-disk"), "snapshot");
    REQUIRE(n > 0);
    const int slot1 = std::stoi(first.header("x-warmslot-slot"));
    const auto file1 = filename_of(answered(b.fake.calls("save"), 200).back());
    REQUIRE(b.proxy.chat(chat_body(document(61, doc_bytes), "Q2?")).status == 200);
    const auto file2 = filename_of(answered(b.fake.calls("save"), 200).back());
    // Another client empties doc 1's slot; warmslot sees it at its next check.
    const auto before = b.proxy.believed_tokens(0, slot1);
    b.fake.put_tokens(slot1, fake_tokenize("someone else", true, true));
    REQUIRE(eventually([&] { return b.proxy.believed_tokens(0, slot1) != before; }, 3s));

    b.fake.delay("restore", 1000ms, 1);
    const auto restores = b.fake.calls("restore").size();
    http_reply restored;
    std::thread client([&] { restored = b.proxy.chat(chat_body(doc1, "Q3?")); });
    const bool restoring = b.fake.wait_for(
        [&](const std::vector<fake_call>& calls) {
            return static_cast<std::size_t>(std::count_if(
                       calls.begin(), calls.end(),
                       [](const fake_call& c) { return c.key == "restore"; })) > restores;
        },
        3s);
    const auto third = b.proxy.chat(chat_body(document(62, doc_bytes), "Q4?"));
    client.join();
    REQUIRE(restoring);
    CAPTURE(third.head());
    CAPTURE(restored.head());
    REQUIRE(third.header("x-warmslot-disk").starts_with("snapshot "));
    CHECK(restored.header("x-warmslot-disk") == "restored " + std::to_string(n) + " tokens");
    CHECK(timings_of(restored)["cache_n"] == n);
    // The third file was saved while the restore was still running (the fake answers it 1 s
    // after it came).
    const auto restore_call = b.fake.calls("restore").at(restores);
    CHECK(answered(b.fake.calls("save"), 200).back().at < restore_call.at + 900ms);
    // It made room by evicting file 2, never file 1 while it was read.
    std::vector<std::string> listed;
    const auto files = b.proxy.indexed_files().at(dir);
    for (const auto& f : files) listed.push_back(f["file"].get<std::string>());
    CHECK(std::find(listed.begin(), listed.end(), file1) != listed.end());
    CHECK(std::find(listed.begin(), listed.end(), file2) == listed.end());
    CHECK(listed.size() == 2);
}

TEST_CASE(
    "tier: a reload in the middle of a request leaves the request the config it arrived with") {
    one_backend b;
    // The request's rendering waits; meanwhile a reload makes every prefix too short for a file.
    b.fake.delay("/apply-template", 600ms, 1);
    auto next = one_backend::make(b.fake, b.tmp, {});
    next.cache.min_prefix_tokens = 1'000'000;
    std::thread reload([&] {
        std::this_thread::sleep_for(200ms);
        b.proxy.publish(next);
    });
    const auto r = b.proxy.chat(chat_body(document(41, doc_bytes), "What is on line 3?"));
    reload.join();
    REQUIRE(r.status == 200);
    CAPTURE(r.head());
    // Its stable prefix is judged, primed and saved under the config it arrived with.
    CHECK(r.header("x-warmslot-disk").starts_with("snapshot "));
    // The next request runs under the new one: no prefix of it is long enough for a file.
    const auto r2 = b.proxy.chat(chat_body(document(42, doc_bytes), "What is on line 3?"));
    REQUIRE(r2.status == 200);
    CAPTURE(r2.head());
    CHECK(r2.header("x-warmslot-disk").empty());
    CHECK(answered(b.fake.calls("save"), 200).size() == 1);
}

}  // namespace warmslot::testing
