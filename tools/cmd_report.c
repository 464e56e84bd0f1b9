/* cmd_report.c: `acttrace report -o report.html FILE...`: one self-contained HTML file (inline CSS,
 * data and script; nothing fetched): a timeline of activities per thread with the transfers between
 * threads drawn as arrows, a duration histogram per activity name, and a flame graph per activity
 * name (the stacks of the events inside activities of that name). The timeline holds the first
 * REPORT_MAX_SLICES slices (it says so when it is cut); histograms and flame graphs cover everything. */
#include "actfold.h"
#include "cliopt.h"
#include "cmds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPORT_MAX_SLICES 20000
#define REPORT_MAX_NAMES 64
#define REPORT_BINS 20

typedef struct rp_name {
    char name[64];
    am_dist d;
    uint64_t never;
    am_fold *fold;
} rp_name;

typedef struct rp_ctx {
    FILE *out;
    bool first;
    uint64_t slices, cut;
    rp_name names[REPORT_MAX_NAMES];
    int nnames;
    nt_symbolizer **sym;
    char key[65536];
} rp_ctx;

static const char report_head[] =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>acttrace report</title>\n<style>\n"
    "body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222;background:#fff}\n"
    "h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ccc}h3{font-size:14px;margin:12px 0 4px}\n"
    "svg{display:block;background:#fafafa;border:1px solid #ddd}\n"
    "rect.act{stroke:#333;stroke-width:.5}line.xfer{stroke:#c00;stroke-width:1.5}\n"
    "rect.bar{fill:#4a7fc1}rect.frame{stroke:#fff;stroke-width:.5}\n"
    "text{font-size:11px;pointer-events:none}table{border-collapse:collapse}td,th{padding:2px 8px;text-align:right}\n"
    "th:first-child,td:first-child{text-align:left}.note{color:#a60}\n"
    "</style></head><body>\n<h1>acttrace report</h1>\n<p id=\"summary\"></p>\n"
    "<h2>Timeline per thread</h2><div id=\"timeline-box\"></div>\n"
    "<h2>Durations per activity name</h2><div id=\"histograms\"></div>\n"
    "<h2>Flame graphs per activity name</h2>\n"
    "<p>Frames are grouped by function, the root on top. A frame's width is the number of events "
    "(Starts, Stops, marks) taken with a stack under it, not time.</p><div id=\"flames\"></div>\n"
    "<script id=\"timeline-data\" type=\"application/json\">[\n";

/* The renderer: reads the JSON blocks above it and builds SVG with DOM calls. */
static const char report_script[] =
    "<script>\n(function(){\n"
    "'use strict';\n"
    "var NS='http://www.w3.org/2000/svg';\n"
    "function J(id){return JSON.parse(document.getElementById(id).textContent);}\n"
    "function el(n,a,p){var e=document.createElementNS(NS,n);for(var k in a)e.setAttribute(k,a[k]);if(p)p.appendChild(e);return e;}\n"
    "function hx(h,t,p){var e=document.createElement(h);e.textContent=t;p.appendChild(e);return e;}\n"
    "function color(s){var h=0;for(var i=0;i<s.length;i++)h=(h*31+s.charCodeAt(i))>>>0;return 'hsl('+(h%360)+',60%,62%)';}\n"
    "function title(e,t){el('title',{},e).textContent=t;}\n"
    "var items=J('timeline-data'),meta=J('report-meta'),names=J('names-data');\n"
    "var sl=items.filter(function(x){return !x.x;}),xf=items.filter(function(x){return x.x;});\n"
    "document.getElementById('summary').textContent=meta.files.join(', ')+': '+meta.activities+' activities, '+meta.never+' never stopped, '+sl.length+' slices and '+xf.length+' transfers on the timeline'+(meta.cut?' ('+meta.cut+' more slices left out)':'')+'.'+(meta.lost?' '+meta.lost+' events were lost by the writer: they are missing here.':'')+(meta.damaged?' '+meta.damaged+' file(s) damaged: only what was read before the damage is shown.':'');\n"
    /* timeline: one row per thread, lanes inside a row for nested/overlapping slices */
    "var t0=Infinity,t1=-Infinity,rows={},order=[];\n"
    "sl.forEach(function(s){t0=Math.min(t0,s.a);t1=Math.max(t1,s.b);var k=s.pid+':'+s.tid;if(!(k in rows)){rows[k]={lanes:[],list:[]};order.push(k);}rows[k].list.push(s);});\n"
    "xf.forEach(function(x){t0=Math.min(t0,x.a);t1=Math.max(t1,x.b);});\n"
    "if(!(t1>t0)){t1=t0+1;}\n"
    "var W=1200,L=150,LH=16,y=20,rowY={};\n"
    "order.forEach(function(k){var r=rows[k];r.list.sort(function(p,q){return p.a-q.a||q.b-p.b;});r.list.forEach(function(s){var i=0;while(i<r.lanes.length&&r.lanes[i]>s.a)i++;r.lanes[i]=s.b;s.lane=i;});r.y=y;rowY[k]=y;y+=Math.max(1,r.lanes.length)*LH+10;});\n"
    "var H=y+10,svg=el('svg',{id:'timeline',width:W,height:H,viewBox:'0 0 '+W+' '+H},document.getElementById('timeline-box'));\n"
    "var defs=el('defs',{},svg),mk=el('marker',{id:'arrow',viewBox:'0 0 10 10',refX:'9',refY:'5',markerWidth:'6',markerHeight:'6',orient:'auto'},defs);el('path',{d:'M0,0L10,5L0,10z',fill:'#c00'},mk);\n"
    "function X(t){return L+(t-t0)/(t1-t0)*(W-L-10);}\n"
    "el('text',{x:L,y:12},svg).textContent=t0.toFixed(3)+' ms';var te=el('text',{x:W-10,y:12,'text-anchor':'end'},svg);te.textContent=t1.toFixed(3)+' ms';\n"
    "order.forEach(function(k){var r=rows[k],p=k.split(':');var lb=el('text',{'class':'thread-label',x:4,y:r.y+12},svg);lb.textContent='pid '+p[0]+' tid '+p[1];\n"
    " r.list.forEach(function(s){var x=X(s.a),w=Math.max(1,X(s.b)-x);var g=el('rect',{'class':'act','data-name':s.n,x:x,y:r.y+s.lane*LH,width:w,height:LH-2,fill:color(s.n),'fill-opacity':s.s?1:0.45},svg);\n"
    "  if(w<3)g.style.stroke='none';\n"
    "  title(g,s.n+' '+s.p+(s.s?'':' (never stopped)')+'\\n'+s.a.toFixed(3)+' .. '+s.b.toFixed(3)+' ms ('+(s.b-s.a).toFixed(3)+' ms) tid '+s.tid);\n"
    "  if(w>40){var tx=el('text',{x:x+2,y:r.y+s.lane*LH+11},svg);tx.textContent=s.n;}});});\n"
    "xf.forEach(function(t){var a=rowY[t.pid+':'+t.f],b=rowY[t.pid+':'+t.t];if(a===undefined||b===undefined)return;\n"
    " var ln=el('line',{'class':'xfer',x1:X(t.a),y1:a+LH/2,x2:X(t.b),y2:b+LH/2,'marker-end':'url(#arrow)'},svg);title(ln,t.n+' '+t.p+': tid '+t.f+' -> tid '+t.t+' at '+t.b.toFixed(3)+' ms');});\n"
    /* histograms */
    "var hb=document.getElementById('histograms');\n"
    "names.forEach(function(n){var d=document.createElement('div');d.className='hist';d.setAttribute('data-name',n.name);hb.appendChild(d);hx('h3',n.name,d);\n"
    " hx('p',n.count+' activities ('+n.never+' never stopped); p50 '+n.p50+' ms, p90 '+n.p90+' ms, p99 '+n.p99+' ms, max '+n.max+' ms',d);\n"
    " var w=600,h=140,s=el('svg',{width:w,height:h+30},d),m=Math.max.apply(null,n.bins.concat([1])),bw=(w-20)/n.bins.length;\n"
    " n.bins.forEach(function(c,i){var bh=c/m*h;var r=el('rect',{'class':'bar',x:10+i*bw,y:h-bh+5,width:Math.max(1,bw-2),height:bh},s);var lo=n.min+(n.max-n.min)*i/n.bins.length;title(r,c+' between '+lo.toFixed(3)+' and '+(lo+(n.max-n.min)/n.bins.length).toFixed(3)+' ms');});\n"
    " el('text',{x:10,y:h+22},s).textContent=n.min+' ms';var e=el('text',{x:w-10,y:h+22,'text-anchor':'end'},s);e.textContent=n.max+' ms';});\n"
    /* flame graphs: the folded stacks of each name as an icicle, root on top */
    "var fb=document.getElementById('flames');\n"
    "names.forEach(function(n){if(!n.stacks.length)return;var d=document.createElement('div');d.className='flame';d.setAttribute('data-name',n.name);fb.appendChild(d);hx('h3',n.name,d);\n"
    " var root={n:n.name,v:0,c:{}},depth=0;n.stacks.forEach(function(st){var fr=st[0].split(';'),node=root;root.v+=st[1];depth=Math.max(depth,fr.length);\n"
    "  for(var i=1;i<fr.length;i++){var c=node.c[fr[i]];if(!c)c=node.c[fr[i]]={n:fr[i],v:0,c:{}};c.v+=st[1];node=c;}});\n"
    " var w=1200,FH=17,s=el('svg',{width:w,height:depth*FH+4},d);\n"
    " (function draw(node,x,y,wd){var r=el('rect',{'class':'frame',x:x,y:y,width:Math.max(.5,wd),height:FH-1,fill:color(node.n)},s);title(r,node.n+' ('+node.v+')');\n"
    "  if(wd>30){var t=el('text',{x:x+3,y:y+12},s);t.textContent=node.n.length*6.5>wd?node.n.slice(0,Math.max(1,Math.floor(wd/6.5)-1))+'\\u2026':node.n;}\n"
    "  var cx=x;Object.keys(node.c).sort().forEach(function(k){var c=node.c[k];var cw=wd*c.v/node.v;draw(c,cx,y+FH,cw);cx+=cw;});})(root,0,0,w);});\n"
    "if(!fb.children.length){hx('p','No event in this trace carries a stack.',fb);}\n"
    "document.body.setAttribute('data-rendered','1');\n"
    "})();\n</script>\n</body></html>\n";

static void report_usage(FILE *f)
{
    fprintf(f, "usage: acttrace report -o report.html FILE...\n"
               "  Writes one self-contained HTML file (no network access needed): a timeline of the\n"
               "  activities per thread with their transfers, a duration histogram and a flame graph per\n"
               "  activity name.\n"
               "  -o, --output OUT  the HTML file (-o -: standard output)\n");
    at_cli_exit_codes(f);
}

static rp_name *rp_get(rp_ctx *c, const char *name)
{
    for (int i = 0; i < c->nnames; i++)
        if (!strcmp(c->names[i].name, name)) return &c->names[i];
    if (c->nnames == REPORT_MAX_NAMES) return NULL;
    rp_name *n = &c->names[c->nnames];
    memset(n, 0, sizeof *n);
    if (!(n->fold = am_fold_new())) return NULL;
    c->nnames++;
    snprintf(n->name, sizeof n->name, "%s", name);
    return n;
}

static void item_sep(rp_ctx *c)
{
    if (!c->first) fputs(",\n", c->out);
    c->first = false;
}

static void rp_slice(void *vc, const am_activity *a, uint64_t tid, int64_t from, int64_t to)
{
    rp_ctx *c = vc;
    if (c->slices >= REPORT_MAX_SLICES) {
        c->cut++;
        return;
    }
    c->slices++;
    item_sep(c);
    fputs("{\"n\":", c->out);
    am_json_string(c->out, a->name);
    fputs(",\"p\":", c->out);
    char path[AM_PATH_MAX];
    am_act_path(a, path, sizeof path);
    am_json_string(c->out, path);
    fprintf(c->out, ",\"pid\":%u,\"tid\":%llu,\"a\":%.6f,\"b\":%.6f,\"s\":%d}", a->pid, (unsigned long long)tid,
            from / 1e6, to / 1e6, a->stopped ? 1 : 0);
}

static void rp_activity(void *vc, const am_activity *a)
{
    rp_ctx *c = vc;
    rp_name *n = rp_get(c, a->name);
    if (n) {
        if (a->stopped) am_dist_add(&n->d, a->stop - a->start);
        else n->never++;
    }
    if (c->slices >= REPORT_MAX_SLICES) {
        c->cut += am_nvisits(a);
        return;
    }
    am_slices(a, rp_slice, c);
    for (uint32_t i = 0; i < am_nxfers(a); i++) {
        const am_transfer *x = am_xfer_at(a, i);
        if (!x->from_tid) continue;
        item_sep(c);
        fputs("{\"x\":1,\"n\":", c->out);
        am_json_string(c->out, a->name);
        fputs(",\"p\":", c->out);
        char path[AM_PATH_MAX];
        am_act_path(a, path, sizeof path);
        am_json_string(c->out, path);
        fprintf(c->out, ",\"pid\":%u,\"f\":%llu,\"t\":%llu,\"a\":%.6f,\"b\":%.6f}", a->pid,
                (unsigned long long)x->from_tid, (unsigned long long)x->to_tid, x->send / 1e6, x->recv / 1e6);
    }
}

static void rp_event(void *vc, const am_event *e)
{
    rp_ctx *c = vc;
    nt_sym_observe(c->sym[e->file], e->ev);
    if (!e->ev->nframes || !e->act || nt_sym_is_symbol_event(e->ev)) return;
    /* one stack per distinct name on the chain, from its outermost activity of that name */
    const char *seen[32];
    int ns = 0;
    for (const am_activity *p = e->act; p && ns < 32; p = p->parent) {
        bool dup = false;
        for (int i = 0; i < ns; i++) dup |= !strcmp(seen[i], p->name);
        if (dup) continue;
        seen[ns++] = p->name;
        rp_name *n = rp_get(c, p->name);
        if (n && am_fold_key(c->key, sizeof c->key, e->act, p->name, false, e->ev, c->sym[e->file]))
            am_fold_add(n->fold, c->key, 1);
    }
}

static bool stacks_first;
static void rp_stack(void *ctx, const char *key, uint64_t n)
{
    FILE *f = ctx;
    fputs(stacks_first ? "[" : ",[", f);
    stacks_first = false;
    am_json_string(f, key);
    fprintf(f, ",%llu]", (unsigned long long)n);
}

static int by_name(const void *x, const void *y)
{
    return strcmp(((const rp_name *)x)->name, ((const rp_name *)y)->name);
}

int at_cmd_report(int argc, char **argv)
{
    static const struct option opts[] = {{"output", required_argument, NULL, 'o'}, {0}};
    const char *outpath = NULL;
    rp_ctx *c = calloc(1, sizeof *c);
    int nfiles = 0, status = AT_EXIT_ERROR;
    char **files = NULL;
    am_model *m = NULL;
    if (!c) return AT_EXIT_ERROR;
    at_cli cli;
    at_cli_init(&cli, "report", report_usage, "o:", opts, argc, argv);
    int o;
    while ((o = at_cli_next(&cli)) > 0)
        if (o == 'o') outpath = cli.arg;
    if (o == AT_CLI_EXIT) {
        status = cli.status;
        goto out;
    }
    files = at_cli_operands(&cli, &nfiles);
    if (!outpath) {
        status = at_cli_usage_error(&cli, "say where the report goes: -o report.html (or -o - for standard output)");
        goto out;
    }
    if (!nfiles) {
        status = at_cli_usage_error(&cli, "give at least one trace FILE");
        goto out;
    }
    if ((status = at_cli_check_inputs("report", files, nfiles))) goto out;
    status = AT_EXIT_ERROR;
    bool to_stdout = !strcmp(outpath, "-");
    if (!(c->sym = calloc((size_t)nfiles, sizeof *c->sym))) goto out;
    for (int i = 0; i < nfiles; i++)
    {
        nt_sym_options so = {.demangle = true, .no_offset = true}; /* the flame graph groups by function */
        if (!(c->sym[i] = nt_sym_new(&so))) goto out;
    }
    char err[600];
    am_options mo = {.progress = true, .need_events = true};
    am_callbacks cb = {.activity = rp_activity, .event = rp_event, .ctx = c};
    if (!(m = am_open(files, nfiles, &mo, &cb, err, sizeof err))) {
        am_errorf("report", "%s", err);
        goto out;
    }
    if (!(c->out = to_stdout ? stdout : fopen(outpath, "w"))) {
        am_errorf("report", "%s: %m", outpath);
        goto out;
    }
    c->first = true;
    fputs(report_head, c->out);
    am_run(m, err, sizeof err); /* a damaged file: what was read before the damage is reported */
    FILE *f = c->out;
    fputs("\n]</script>\n<script id=\"report-meta\" type=\"application/json\">{\"files\":[", f);
    for (int i = 0; i < nfiles; i++) {
        if (i) fputc(',', f);
        am_json_string(f, files[i]);
    }
    uint64_t total = 0;
    for (int i = 0; i < c->nnames; i++) total += c->names[i].d.n + c->names[i].never;
    uint64_t lost = 0;
    int damaged = 0;
    for (int i = 0; i < am_nfiles(m); i++) {
        lost += nt_get_counts(am_reader(m, i))->events_lost;
        damaged += nt_get_damage(am_reader(m, i)) != NULL;
    }
    fprintf(f, "],\"activities\":%llu,\"never\":%llu,\"cut\":%llu,\"lost\":%llu,\"damaged\":%d}</script>\n",
            (unsigned long long)total, (unsigned long long)am_never_stopped(m), (unsigned long long)c->cut,
            (unsigned long long)lost, damaged);
    fputs("<script id=\"names-data\" type=\"application/json\">[", f);
    qsort(c->names, (size_t)c->nnames, sizeof c->names[0], by_name);
    bool firstname = true;
    for (int i = 0; i < c->nnames; i++) {
        rp_name *n = &c->names[i];
        if (n->d.n + n->never == 0) continue; /* a name seen only around stacks */
        fputs(firstname ? "\n{\"name\":" : ",\n{\"name\":", f);
        firstname = false;
        am_json_string(f, n->name);
        uint64_t bins[REPORT_BINS];
        am_dist_bins(&n->d, REPORT_BINS, bins);
        fprintf(f, ",\"count\":%llu,\"never\":%llu,\"min\":%.3f,\"max\":%.3f,\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"bins\":[",
                (unsigned long long)(n->d.n + n->never), (unsigned long long)n->never, n->d.min / 1e6,
                n->d.max / 1e6, am_dist_pct(&n->d, 50) / 1e6, am_dist_pct(&n->d, 90) / 1e6,
                am_dist_pct(&n->d, 99) / 1e6);
        for (int b = 0; b < REPORT_BINS; b++) fprintf(f, "%s%llu", b ? "," : "", (unsigned long long)bins[b]);
        fputs("],\"stacks\":[", f);
        stacks_first = true;
        am_fold_each(n->fold, rp_stack, f);
        fputs("]}", f);
    }
    fputs("\n]</script>\n", f);
    fputs(report_script, f);
    if (to_stdout) {
        if (fflush(f) != 0 || ferror(f)) {
            am_errorf("report", "standard output: write failed");
            goto out;
        }
    } else {
        if (fclose(f) != 0) {
            am_errorf("report", "%s: write failed", outpath);
            remove(outpath);
            goto out;
        }
        fprintf(stderr, "acttrace report: wrote %s\n", outpath);
    }
    status = am_report_damage(m, "report");
out:
    am_close(m);
    if (c->sym)
        for (int i = 0; i < nfiles; i++) nt_sym_free(c->sym[i]);
    free(c->sym);
    for (int i = 0; i < c->nnames; i++) {
        am_dist_free(&c->names[i].d);
        am_fold_free(c->names[i].fold);
    }
    free(c);
    return status;
}
