// The Jinja interpreter (lib/areal/text/jinja_*) against transformers' own Jinja environment: the
// same templates and variables must give the same text, byte for byte, or both fail.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "areal/text/jinja_template.h"
#include "run_python.h"

namespace {

using areal::jinja::JinjaError;
using areal::jinja::Template;
using areal::jinja::Value;
using areal::jinja::ValueDict;
using json = nlohmann::ordered_json;

ValueDict context_of(const json& j) { return Value::from_json(j).dict(); }

// Variables every snippet below sees.
const json kContext = json::parse(R"({
  "x": "str", "xs": [1, 2, 3], "s": "héllo wörld", "e": "",
  "obj": {"b": [1, 2, {"c": null}], "a": true, "é": "ü", "f": 0.25},
  "ms": [{"role": "system", "content": "  sys  "}, {"role": "user", "content": "a"},
         {"role": "assistant", "content": "<think>\nr\n</think>\n\nb"}]
})");

// Each exercises features real chat templates use; comments say which.
const std::vector<std::string> kSnippets = {
    // whitespace: trim_blocks, lstrip_blocks, -, +, comments, the trailing newline
    "a\n  {% if x %}\n  yes\n  {% endif %}\nb\n",
    "{%- for m in ms -%}\n{{ m.role }}:{{ m['content'] | trim }}\n{%- endfor %}",
    "{# comment #}\n  {#- c2 -#}  A {{- ' B ' -}} C\n{% if true +%}\n  D{% endif %}\n\n",
    "  {% if true %}x{% endif %}  \n  {%+ if true %}y{% endif %}",
    "{% if x %}\r\nwin\r\n{% endif %}",
    // loops: loop.*, filters, else, nested, scoping, break/continue, unpacking
    "{% for i in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/"
    "{{ loop.last }}/{{ loop.length }} {% endfor %}",
    "{% for x in xs if x > 1 %}{{ x }}{{ loop.index }},{% else %}none{% endfor %}|{% for y in [] %}y{% else %}empty{% endfor %}",
    "{% set ns = namespace(n=0, s='') %}{% set c = 5 %}{% for x in xs %}{% set c = c + x %}{% set ns.n = ns.n + x %}"
    "{{ c }}{% endfor %}|{{ c }}|{{ ns.n }}",
    "{% for a in xs %}{% for b in xs %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% for k, v in obj.items() %}{{ k }}={{ v }};{% endfor %}{% for k in obj %}{{ k }}{% endfor %}",
    "{% for i in range(1, 7, 2) %}{{ loop.cycle('o', 'e') }}{{ i }}{% if loop.previtem is defined %}<{{ loop.previtem }}"
    "{% endif %}{% endfor %}",
    "{% for m in ms[::-1] %}{% set index = (ms|length - 1) - loop.index0 %}{{ index }}{{ m.role[0] }}{% endfor %}",
    // slices and indexing, by code point
    "{{ s[1:] }}|{{ s[:-1] }}|{{ s[::-1] }}|{{ xs[::-1] }}|{{ xs[1:3] }}|{{ s[-2:] }}|{{ s[1] }}|{{ xs[-1] }}|{{ xs.0 }}",
    // string methods
    "{{ s.startswith('h') }} {{ s.endswith('d') }} {{ s.split(' ') }} {{ s.split() }} {{ '  x \n'.strip() }}|"
    "{{ 'xxaxx'.strip('x') }}|{{ s.upper() }} {{ s.title() }} {{ s.replace('l', 'L') }}",
    "{% set c = ms[2].content %}{{ c.split('</think>')[-1].lstrip('\n') }}|"
    "{{ c.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') }}|{{ '<think>' in c }}",
    "{{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ 'a-b-c'.rsplit('-', 1) }} {{ 'abcab'.find('c') }} "
    "{{ 'abab'.count('ab') }} {{ '-'.join(['x', 'y']) }} {{ '12'.isdigit() }} {{ s.startswith(('x', 'h')) }}",
    // tojson as transformers defines it (json.dumps, ensure_ascii=False)
    "{{ obj | tojson }}|{{ obj | tojson(indent=2) }}|{{ obj|tojson(separators=(',', ':')) }}|{{ 'é\"\\n\t' | tojson }}"
    "|{{ [1e20, 0.1, 10.0, -0.0001, 1e-5, 123456789.125, 1e16, 1e15] | tojson }}|{{ obj|tojson(sort_keys=true) }}"
    "|{{ [] | tojson(indent=4) }}|{{ {} | tojson }}|{{ ms[1] | tojson(indent=4) }}",
    // Python's str() of values, arithmetic
    "{{ none }}|{{ true }}|{{ [1, 'a', none, true, 1.5, {'k': [2]}] }}|{{ {'a': \"it's\"} }}|{{ 7 / 2 }}|{{ 7 // 2 }}"
    "|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 'ab' * 3 }}|{{ 'x' ~ 1 ~ none }}|{{ 1 + 2.5 }}|{{ 3 - 5 }}"
    "|{{ 6 / 3 }}|{{ obj.f * 2 }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ -xs[0] }}",
    // tests
    "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ none is none }}{{ x is string }}{{ xs is iterable }}"
    "{{ obj is mapping }}{{ 3 is number }}{{ 3 is integer }}{{ 3.0 is float }}{{ false is false }}{{ true is true }}"
    "{{ 1 is true }}{{ x is not none }}{{ 4 is divisibleby 2 }}{{ 3 is odd }}{{ 'a' is equalto 'a' }}"
    "{{ x is sameas none }}{{ xs is sequence }}{{ obj is iterable }}{{ x is mapping }}{{ 'ab' is lower }}{{ y is none }}",
    // filters
    "{{ xs|length }} {{ s|length }} {{ xs|join(', ') }} {{ xs|first }} {{ xs|last }} {{ xs|reverse|list }} "
    "{{ ms|selectattr('role', 'equalto', 'user')|list|length }} {{ ms|map(attribute='role')|join('+') }} "
    "{{ ms|rejectattr('role', 'equalto', 'user')|map(attribute='role')|list }} {{ ['a','b','a']|unique|list }} "
    "{{ [3,1,2]|sort }} {{ y|default('d') }} {{ e|default('d', true) }} {{ obj|items|list|length }} {{ '5'|int + 1 }} "
    "{{ xs|sum }} {{ [1,5,3]|max }} {{ 'Hello'|lower }} {{ 'x'|upper }} {{ 'a b'|capitalize }} {{ 'a\nb\n\nc'|indent(2) }} "
    "{{ xs|select('odd')|list }} {{ xs|reject('odd')|list }} {{ obj.keys()|list }} {{ obj.get('zz', 'dflt') }} "
    "{{ ms|selectattr('content')|list|length }} {{ xs|map('string')|join }} {{ 3|string + 'x' }} {{ ' a '|trim }}|"
    "{{ 'abc'|replace('b', 'B') }} {{ 2.5|round }} {{ -3|abs }} {{ '1.5'|float }} {{ 'ab'|list }} {{ xs|count }}",
    // expressions
    "{{ 'a' if x else 'b' }}|{{ 'a' if y }}|{{ x and 'yes' }}|{{ y or 'no' }}|{{ not x }}|{{ 'x' in 'axb' }}|"
    "{{ 2 in xs }}|{{ 9 not in xs }}|{{ 'a' in obj }}|{{ not xs[0] is string }}|{{ (1 + 2) * 3 }}|{{ [1, 2] + [3] }}"
    "|{{ xs[0] < xs[1] <= 2 }}|{{ 'b' > 'a' }}|{{ 'tools' in ms[0] }}|{{ x is defined and x }}",
    "{{ 'a' 'b' }}{{ \"q'\" }}{{ 'a\\tb\\u00e9\\x41' }}",
    // macros, set blocks, dict()
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} "
    "{{ greet(name='C') }}",
    "{% set t %}X{{ 1 + 1 }}{% endset %}{{ t }}|{{ dict(a=1, b='x') }}|{{ namespace(a=1).a }}",
    "{% if ms[0].role == 'system' %}{% set sys = ms[0].content|trim %}{% set rest = ms[1:] %}{% else %}"
    "{% set sys = '' %}{% endif %}[{{ sys }}]{{ rest|length }}",
    // errors: both sides must fail
    "{{ raise_exception('no system role') }}",
    "{{ y.attribute }}",
    "{{ 'a' + 1 }}",
    "{{ none.attribute }}",
};

}  // namespace

TEST_CASE("jinja: templates render exactly as transformers' Jinja environment renders them", "[python]") {
  json cases = json::array();
  for (const auto& snippet : kSnippets) cases.push_back({{"template", snippet}, {"context", kContext}});
  const auto dir = std::filesystem::temp_directory_path() / "areal_jinja_snippets";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "cases.json") << cases.dump();
  PythonResult py = run_python("render_chat_template.py " + (dir / "cases.json").string());
  REQUIRE(py.exit_code == 0);
  const json expected = json::parse(py.output.substr(py.output.find('[')));
  REQUIRE(expected.size() == kSnippets.size());
  int errors = 0;
  for (size_t i = 0; i < kSnippets.size(); ++i) {
    INFO("template: " << kSnippets[i]);
    std::string text, error;
    try {
      text = Template(kSnippets[i], "snippet").render(context_of(kContext));
    } catch (const JinjaError& e) {
      error = e.what();
    }
    if (expected[i].contains("error")) {
      INFO("transformers: " << expected[i]["error"].get<std::string>());
      CHECK_FALSE(error.empty());
      ++errors;
    } else {
      INFO("our error: " << error);
      CHECK(text == expected[i]["text"].get<std::string>());
    }
  }
  CHECK(errors == 3);  // the last snippets but `none.attribute` (Undefined, printed as "")
}

TEST_CASE("jinja: errors name the template's line and what is unsupported") {
  auto error_of = [](const std::string& source, const ValueDict& context = {}) {
    try {
      Template(source, "tmpl").render(context);
    } catch (const JinjaError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("a\n{% include 'x' %}") == "tmpl line 2: '{% include %}' is not supported (supported: if, for, set, "
                                            "macro, break, continue, generation)");
  CHECK(error_of("{% if x %}\nopen") == "tmpl line 2: the template ends before {% elif or else or endif %}");
  CHECK(error_of("\n\n{{ x | nosuchfilter }}") == "tmpl line 3: unknown filter 'nosuchfilter'");
  CHECK(error_of("{{ 'a' ~ }}") == "tmpl line 1: unexpected the end of the tag in an expression");
  CHECK(error_of("\n{{ raise_exception('bad roles') }}") == "tmpl line 2: the template raised: bad roles");
  CHECK(error_of("{{ m.content.upper() }}", context_of(json{{"m", json::object()}})) ==
        "tmpl line 1: 'dict object' has no attribute 'content'");
  CHECK(error_of("{% set x.y = 1 %}", context_of(json{{"x", json::object()}})) ==
        "tmpl line 1: cannot set attribute 'y' of 'x': only a namespace() takes attributes");
}
