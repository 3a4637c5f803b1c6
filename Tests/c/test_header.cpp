// mtls.h from C++17 (-Wall -Wextra -Werror -pedantic): the header compiles as C++, its handles
// fit RAII owners, and the API works from C++ code.
#include <mtls.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

int passed = 0;

void check(bool ok, const char *what, int line) {
    if (!ok) {
        std::fprintf(stderr, "test_header.cpp:%d: CHECK failed: %s (last error: %s)\n", line, what, mtls_last_error());
        std::exit(1);
    }
    ++passed;
}
#define CHECK(cond) check((cond), #cond, __LINE__)

struct PolicyFree { void operator()(mtls_policy *p) const { mtls_policy_free(p); } };
struct CertFree { void operator()(mtls_cert *c) const { mtls_cert_free(c); } };
struct ResultFree { void operator()(mtls_trust_result *r) const { mtls_trust_result_free(r); } };
using Policy = std::unique_ptr<mtls_policy, PolicyFree>;
using Cert = std::unique_ptr<mtls_cert, CertFree>;
using Result = std::unique_ptr<mtls_trust_result, ResultFree>;

std::string take(char *s) {
    std::string out = s ? s : "";
    mtls_string_free(s);
    return out;
}

}  // namespace

int main() {
    CHECK(std::string(mtls_version()) == MTLS_VERSION_STRING);
    CHECK(mtls_version_number() == MTLS_VERSION_NUMBER);
    CHECK(std::string(mtls_error_name(MTLS_E_INVALID_ARGUMENT)) == "invalid_argument");

    const char *tmp = std::getenv("MTLS_TEST_TMP") ? std::getenv("MTLS_TEST_TMP") : "/tmp";
    const std::string dir = std::string(tmp) + "/header-cpp";
    const std::string make = "rm -rf " + dir + " && mkdir -p " + dir + " && cd " + dir +
        " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout k.pem -out c.pem"
        " -subj /CN=cpp.test -addext subjectAltName=DNS:cpp.test -addext extendedKeyUsage=serverAuth"
        " -days 2 2>/dev/null";
    CHECK(std::system(make.c_str()) == 0);

    mtls_cert **list = nullptr;
    size_t count = 0;
    CHECK(mtls_cert_list_load((dir + "/c.pem").c_str(), &list, &count) == MTLS_OK);
    CHECK(count == 1);
    Cert leaf(list[0]);
    list[0] = nullptr;
    mtls_cert_list_free(list, count);

    char *subject = nullptr;
    CHECK(mtls_cert_subject(leaf.get(), &subject) == MTLS_OK);
    CHECK(take(subject).find("cpp.test") != std::string::npos);

    mtls_policy *raw = nullptr;
    CHECK(mtls_policy_new(&raw) == MTLS_OK);
    Policy policy(raw);
    CHECK(mtls_policy_add_anchor(policy.get(), leaf.get()) == MTLS_OK);
    CHECK(mtls_policy_set_anchors_only(policy.get(), 1) == MTLS_OK);

    std::vector<mtls_cert *> chain{leaf.get()};
    mtls_trust_result *r = nullptr;
    CHECK(mtls_evaluate(policy.get(), chain.data(), chain.size(), "cpp.test", MTLS_PURPOSE_SERVER, 0, &r) == MTLS_OK);
    Result good(r);
    int trusted = 0;
    CHECK(mtls_trust_result_trusted(good.get(), &trusted) == MTLS_OK && trusted == 1);

    CHECK(mtls_evaluate(policy.get(), chain.data(), chain.size(), "other.test", MTLS_PURPOSE_SERVER, 0, &r) == MTLS_OK);
    Result wrong_name(r);
    CHECK(mtls_trust_result_trusted(wrong_name.get(), &trusted) == MTLS_OK && trusted == 0);

    CHECK(mtls_evaluate(nullptr, chain.data(), chain.size(), "cpp.test", MTLS_PURPOSE_SERVER, 0, &r) == MTLS_E_INVALID_ARGUMENT);
    std::printf("%d passed, 0 failed\n", passed);
    return 0;
}
