// The extension's logic (src/__tests__): words, the event stream's parser, the panel's DOM.
// Those modules import nothing of JupyterLab, so ts-jest runs them as they are.
module.exports = {
  testEnvironment: 'jsdom',
  testRegex: 'src/__tests__/.*\\.spec\\.ts$',
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.test.json' }]
  },
  collectCoverageFrom: ['src/**/*.ts', '!src/**/*.d.ts']
};
